"""TrtOptimizer's report: report.json, report.md and the latency plot."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import List, Sequence

from tfx_bridge.artifacts.savedmodel import (
    EXAMPLE_SIGNATURE,
    SERVING_SIGNATURE,
    TFLITE_FILE,
    TFLITE_FLAG,
    XLA_FLAG,
)
from tfx_bridge.components.trt_optimizer import decide
from tfx_bridge.components.trt_optimizer.candidates import (
    CANDIDATE_FLAG,
)
from tfx_bridge.components.trt_optimizer.detect import Probe
from tfx_bridge.components.trt_optimizer.results import (
    BACKEND_ORIGINAL,
    BACKEND_TENSORRT,
    NOXLA_SIGNATURE,
    REPORT_JSON,
    REPORT_MD,
    REPORT_PNG,
    CandidateResult,
)


def build_report(results, chosen, probe: Probe, precision, batches, atol, rtol, topk,
                 seconds, blessed, decision: str, timing: dict, specs=(),
                 session=None) -> dict:
    """report.json's content. ``latency_before_ms`` / ``_after`` are the same run's
    interleaved p50s of the original and the kept model (equal when the original is
    kept); ``decision`` says which was kept and why, with the rule's figures;
    ``session`` is TF Serving's inter-op setting measured for it
    (``session_threads``; None where it was not measured)."""
    base = results[0]
    before = {f"p50_ms_batch_{lat.batch}": round(lat.p50_ms, 4) for lat in base.latency}
    after = {f"p50_ms_batch_{lat.batch}": round(lat.p50_ms, 4) for lat in chosen.latency}
    trt = chosen.backend == BACKEND_TENSORRT
    return {
        "blessed": blessed,
        "backend": chosen.backend,
        "candidate": chosen.name,
        "precision": precision if trt else "fp32",
        "requires_gpu": trt,
        "serving_flags": chosen.serving_flags,
        "tensorrt": {"ran": trt,
                     "available": probe.tensorrt, "gpus": probe.gpus,
                     "linked_version": probe.linked_version,
                     "why_not": probe.why_not() or None},
        "serving_notes": serving_notes(chosen.serving_flags)
        + kept_original_notes(chosen, results, probe.can_run_tensorrt, decision),
        "rewrites": chosen.notes,
        "latency_before_ms": before,
        "latency_after_ms": after,
        "decision": {"kept": chosen.name, "reason": decision,
                     "rule": None if probe.can_run_tensorrt else RULE,
                     "margin": decide.MARGIN, "alpha": decide.ALPHA},
        "timing": timing,
        "session": session,
        "tolerance": {"atol": atol, "rtol": rtol, "topk_agreement": topk},
        "batches": list(batches),
        # What was timed and checked: the inputs' shapes (batch -1) and value ranges.
        "representative_inputs": [s.to_text() for s in specs],
        "seconds": round(seconds, 2),
        "candidates": [dataclasses.asdict(r) | {"passed": r.passed} for r in results],
    }


RULE = (f"a candidate replaces the original only when, at every batch size, the sign "
        f"test's {1 - decide.ALPHA:.0%} upper bound on the median of its per-round "
        f"latency ratios (candidate / original, same round) is at most {decide.MARGIN} "
        f"(at least {1 - decide.MARGIN:.0%} faster); alpha is shared among the candidates "
        "timed")


def serving_notes(flags: Sequence[str]) -> List[str]:
    """What each serving flag the kept model needs means for the server."""
    notes = []
    if XLA_FLAG in flags:
        notes.append(f"TF Serving needs `{XLA_FLAG}` for the XLA-compiled serving_default "
                     "(marked experimental in TF Serving, server-wide); "
                     f"`{NOXLA_SIGNATURE}` is kept for servers without it.")
    if TFLITE_FLAG in flags:
        notes.append(f"TF Serving serves `{TFLITE_FILE}` only with `{TFLITE_FLAG}` "
                     f"(marked experimental in TF Serving, server-wide, ignored by TFRT-based "
                     f"servers); under it the server exposes {SERVING_SIGNATURE} only "
                     f"({EXAMPLE_SIGNATURE} stays in the SavedModel, so tf.Example clients "
                     "lose it on that server). Without the flag it serves the unchanged "
                     "SavedModel, at the original's speed.")
    return notes


def kept_original_notes(chosen: CandidateResult, results: List[CandidateResult],
                        trt: bool, decision: str) -> List[str]:
    """Says plainly when the kept model is the original, and why."""
    if trt or chosen.name != BACKEND_ORIGINAL:
        return []
    tried = [r.name for r in results[1:]]
    opt_in = sorted(n for n, flag in CANDIDATE_FLAG.items() if flag and n not in tried)
    note = (f"Kept the original SavedModel (candidates tried: {', '.join(tried) or 'none'}): "
            f"{decision.removeprefix('kept the original: ')}.")
    if opt_in:
        note += (" Opt-in candidates that need experimental TF Serving flags: "
                 + ", ".join(f"{n} ({CANDIDATE_FLAG[n]})" for n in opt_in) + ".")
    return [note]


def write_report(output_dir: str, report: dict, results: List[CandidateResult]) -> None:
    with open(os.path.join(output_dir, REPORT_JSON), "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    lines = ["# TrtOptimizer report", "",
             f"Result: **{'blessed' if report['blessed'] else 'NOT blessed'}**, backend "
             f"**{report['backend']}** (candidate {report['candidate']}), precision "
             f"{report['precision']}", ""]
    if not report["tensorrt"]["ran"]:
        lines += [f"TensorRT did not run: {report['tensorrt']['why_not']}.", ""]
    notes = report["serving_notes"] + [f"Rewrite: {r}" for r in report["rewrites"]]
    lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    lines += [f"Decision: {report['decision']['reason']}.", ""]
    timing = report["timing"]
    if "error" in timing:  # the timing child did not finish: no plan, no figures
        lines += [f"Timing: not finished: {timing['error']}.", ""]
    else:
        plan = ", ".join(f"batch {b}: {p['rounds']} rounds x {p['calls_per_round']} calls"
                         for b, p in timing["plan"].items())
        onednn = "off, as stock TF Serving" if timing.get("onednn") == "0" else "as set here"
        lines += [f"Timing: {timing['seconds']:.1f} s of a {timing['budget_s']:g} s budget "
                  f"({plan}); oneDNN {onednn}.", ""]
    if report["decision"]["rule"]:
        lines += [f"Rule: {report['decision']['rule']}.", ""]
    if report.get("session"):
        lines += [f"Session threads (Session::Run, {report['session']['cores']} cores): "
                  f"{report['session']['reason']}.", ""]
    lines += ["| candidate | backend | " + " | ".join(
        f"p50 b{b} ms | p99 b{b} ms" for b in report["batches"]) + " | drift ok | note |",
        "|---|---|" + "---|---|" * len(report["batches"]) + "---|---|"]
    for r in results:
        by_batch = {x.batch: x for x in r.latency}  # a refused candidate lacks later ones
        lat = " | ".join(f"{by_batch[b].p50_ms:.3f} | {by_batch[b].p99_ms:.3f}"
                         if b in by_batch else "- | -" for b in report["batches"])
        worst = max((d.max_abs for d in r.drift), default=0.0)
        note = r.error or (f"max abs {worst:.3g}" if r.drift else "")
        lines.append(f"| {r.name} | {r.backend} | {lat} | {'yes' if r.passed else 'NO'} | "
                     f"{note} |")
    judged = [r for r in results if r.speedup]
    if judged:
        lines += ["", "| candidate | batch | ratio (median) | lowest | upper bound | rounds | "
                  "result |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r.name} | {s.batch} | {s.ratio:.3f} | {s.low:.3f} | {s.bound:.3f} | "
                  f"{s.rounds} | {s.refused or 'faster'} |" for r in judged for s in r.speedup]
    with open(os.path.join(output_dir, REPORT_MD), "w") as f:
        f.write("\n".join(lines) + "\n")
    _plot(os.path.join(output_dir, REPORT_PNG), results, report["batches"])


def _plot(path: str, results: List[CandidateResult], batches) -> None:
    """A small bar chart of p50 latency per candidate and batch size."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in results if r.latency]
    fig, ax = plt.subplots(figsize=(6, 3), dpi=100)
    width = 0.8 / max(1, len(batches))
    for i, b in enumerate(batches):
        xs = [j + i * width for j in range(len(shown))]
        p50 = [next((x.p50_ms for x in r.latency if x.batch == b), 0.0) for r in shown]
        ax.bar(xs, p50, width, label=f"batch {b}")
    ax.set_xticks([j + width * (len(batches) - 1) / 2 for j in range(len(shown))])
    ax.set_xticklabels([r.name + ("" if r.passed else " (drift)") for r in shown], fontsize=8)
    ax.set_ylabel("p50 ms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

