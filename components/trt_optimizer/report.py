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
                 seconds, blessed) -> dict:
    base = results[0]
    before = {f"p50_ms_batch_{lat.batch}": round(lat.p50_ms, 4) for lat in base.latency}
    after = {f"p50_ms_batch_{lat.batch}": round(lat.p50_ms, 4) for lat in chosen.latency}
    return {
        "blessed": blessed,
        "backend": chosen.backend,
        "candidate": chosen.name,
        "precision": precision if chosen.backend == BACKEND_TENSORRT else "fp32",
        "requires_gpu": chosen.backend == BACKEND_TENSORRT,
        "serving_flags": chosen.serving_flags,
        "tensorrt": {"ran": chosen.backend == BACKEND_TENSORRT,
                     "available": probe.tensorrt, "gpus": probe.gpus,
                     "linked_version": probe.linked_version,
                     "why_not": probe.why_not() or None},
        "serving_notes": serving_notes(chosen.serving_flags)
        + kept_original_notes(chosen, results, probe.can_run_tensorrt),
        "rewrites": chosen.notes,
        "latency_before_ms": before,
        "latency_after_ms": after,
        "tolerance": {"atol": atol, "rtol": rtol, "topk_agreement": topk},
        "batches": list(batches),
        "seconds": round(seconds, 2),
        "candidates": [dataclasses.asdict(r) | {"passed": r.passed} for r in results],
    }


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
                        trt: bool) -> List[str]:
    """Says plainly when the kept model is the original, and why."""
    if trt or chosen.name != BACKEND_ORIGINAL:
        return []
    tried = [r.name for r in results[1:]]
    opt_in = sorted(n for n, flag in CANDIDATE_FLAG.items() if flag and n not in tried)
    note = ("Kept the original SavedModel: nothing faster exists on this host among the "
            f"candidates tried ({', '.join(tried) or 'none'}).")
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
    lines += ["| candidate | backend | " + " | ".join(
        f"p50 b{b} ms | p99 b{b} ms" for b in report["batches"]) + " | drift ok | note |",
        "|---|---|" + "---|---|" * len(report["batches"]) + "---|---|"]
    for r in results:
        lat = " | ".join(f"{x.p50_ms:.3f} | {x.p99_ms:.3f}" for x in r.latency) or " | ".join(
            ["-", "-"] * len(report["batches"]))
        worst = max((d.max_abs for d in r.drift), default=0.0)
        note = r.error or (f"max abs {worst:.3g}" if r.drift else "")
        lines.append(f"| {r.name} | {r.backend} | {lat} | {'yes' if r.passed else 'NO'} | "
                     f"{note} |")
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
        ax.bar(xs, [r.latency[i].p50_ms for r in shown], width, label=f"batch {b}")
    ax.set_xticks([j + width * (len(batches) - 1) / 2 for j in range(len(shown))])
    ax.set_xticklabels([r.name + ("" if r.passed else " (drift)") for r in shown], fontsize=8)
    ax.set_ylabel("p50 ms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

