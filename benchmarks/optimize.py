"""Optimizer benchmark: what TrtOptimizer keeps, and whether an independent re-timing
agrees.

For each of the importer's reference models (tfx_bridge.pipelines.demo_models),
and any SavedModel or Model folder given with ``--model``: run TrtOptimizer's
core with its defaults (on this CPU host: the candidates stock TF Serving serves
without experimental flags, timed within ``--time-budget`` seconds), then re-time
the input against the output in a fresh process, oneDNN off (the kernels stock
TF Serving's CPU build runs), interleaved rounds, same inputs. The optimizer's
own figures (the same run's interleaved medians) and the re-timing are both
reported. The check: the re-timing does not show the output slower than the
input, i.e. at every batch size the sign test's 95% interval on the median
per-round ratio (output / input) does not lie wholly above 1.0; a row that
fails says SLOWER and the run exits 1. ``--opt-in`` also runs every candidate
(XLA, TFLite: they need experimental TF Serving flags). Figures go into
docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/optimize.py [--model DIR]... [--time-budget 60]
        [--retime-budget 30] [--opt-in] [--no-reference] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import convert  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig  # noqa: E402
from tfx_bridge.components.trt_optimizer import (  # noqa: E402
    decide,
    detect,
    inputs,
    measure_worker,
    optimize,
)
from tfx_bridge.components.trt_optimizer.candidates import CPU_CANDIDATES  # noqa: E402
from tfx_bridge.components.trt_optimizer.config import OptimizerConfig  # noqa: E402
from tfx_bridge.components.trt_optimizer.results import (  # noqa: E402
    DEFAULT_BATCHES,
    DEFAULT_TIME_BUDGET_S,
    SERVING_DIR,
)
from tfx_bridge.pipelines import demo_models  # noqa: E402

NOT_SLOWER = 1.0  # the re-timed median ratio (output / input) at every batch size


def reference_models(tmp: str) -> dict:
    """Each reference model imported into ``tmp``: {name: Model folder}."""
    out = {}
    for name, (cls, kwargs, specs, outputs) in demo_models.REFERENCE_MODELS.items():
        weights = os.path.join(tmp, f"{name}.pt")
        torch.save(demo_models.build(name).state_dict(), weights)
        out[name] = os.path.join(tmp, name)
        convert.import_model(ImporterConfig(
            source_kind="state_dict", source_path=weights,
            module_class=f"tfx_bridge.pipelines.demo_models:{cls.__name__}",
            module_kwargs=kwargs, inputs=specs, output_names=outputs), out[name])
    return out


def retime(source: str, kept: str, flags, budget_s: float) -> dict:
    """Input vs output in a fresh oneDNN-off process, interleaved: per batch size the
    p50s and the per-round ratio's median and sign-test bound."""
    fn = tf.saved_model.load(source).signatures["serving_default"]
    specs = inputs.input_specs(fn, inputs.importer_report(source))
    feeds = {b: inputs.representative_inputs(specs, b, seed=1) for b in DEFAULT_BATCHES}
    latency, info = measure_worker.time_in_child(
        {"input": (source, []), "output": (kept, list(flags))}, feeds, budget_s,
        iterations=300, min_rounds=decide.min_rounds(decide.ALPHA / 2),
        timeout_s=max(600.0, 20 * budget_s), warm=False)
    out = {"onednn": info["onednn"], "seconds": info["seconds"]}
    for before, after in zip(latency["input"], latency["output"], strict=True):
        ratios = sorted(a / b for a, b in zip(after.rounds_ms, before.rounds_ms, strict=True))
        n = len(ratios)
        k = decide.upper_rank(n, decide.ALPHA / 2)  # two-sided: alpha/2 each side
        out[f"b{before.batch}"] = {
            "p50_before": before.p50_ms, "p50_after": after.p50_ms, "rounds": n,
            "ratio": (ratios[(n - 1) // 2] + ratios[n // 2]) / 2,
            "lower": ratios[n - k], "upper": ratios[k - 1]}
    # Slower only beyond the rounds' spread: the lower bound on the median ratio above 1.
    # Two copies of one graph re-timed on a shared host differ by more than 10% in
    # some rounds, so the median alone would call noise a slowdown.
    out["slower"] = any(out[f"b{b}"]["lower"] > NOT_SLOWER for b in DEFAULT_BATCHES)
    return out


def run_one(name: str, model_dir: str, out_dir: str, config: OptimizerConfig, probe,
            retime_budget_s: float) -> dict:
    start = time.perf_counter()
    result = optimize.optimize(model_dir, out_dir, config, probe=probe)
    seconds = time.perf_counter() - start
    report = result.report
    row = {"model": name, "candidate": report["candidate"], "backend": result.backend,
           "blessed": result.blessed, "serving_flags": result.serving_flags,
           "decision": report["decision"]["reason"], "optimize_s": round(seconds, 1),
           "timing": report["timing"],
           "same_run": {f"b{b}": {"p50_before": report["latency_before_ms"][f"p50_ms_batch_{b}"],
                                  "p50_after": report["latency_after_ms"][f"p50_ms_batch_{b}"]}
                        for b in DEFAULT_BATCHES}}
    source = inputs.resolve_saved_model(model_dir)
    row["retimed"] = retime(source, os.path.join(out_dir, SERVING_DIR), result.serving_flags,
                            retime_budget_s)
    print(f"{name}: kept {row['candidate']} in {row['optimize_s']} s; re-timed median ratio "
          + ", ".join(f"b{b} {row['retimed'][f'b{b}']['ratio']:.3f}" for b in DEFAULT_BATCHES),
          file=sys.stderr, flush=True)
    print(json.dumps(row, sort_keys=True), file=sys.stderr, flush=True)  # kept if a later one fails
    return row


def table(rows) -> str:
    lines = ["| model | kept | optimize s (timing s / budget) | same run p50 b1 before -> "
             "after ms | b32 | re-timed, fresh process, oneDNN off: p50 b1 before -> after ms "
             "(median ratio [95% interval]) | b32 | re-timed not slower |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same, again = r["same_run"], r["retimed"]
        cells = [f"{same[f'b{b}']['p50_before']:.3f} -> {same[f'b{b}']['p50_after']:.3f}"
                 for b in DEFAULT_BATCHES]
        cells += [f"{again[f'b{b}']['p50_before']:.3f} -> {again[f'b{b}']['p50_after']:.3f} "
                  f"({again[f'b{b}']['ratio']:.3f} [{again[f'b{b}']['lower']:.3f}, "
                  f"{again[f'b{b}']['upper']:.3f}])" for b in DEFAULT_BATCHES]
        lines.append(f"| {r['model']} | {r['candidate']} ({r['backend']}) | {r['optimize_s']} "
                     f"({r['timing']['seconds']:.1f} / {r['timing']['budget_s']:g}) | "
                     + " | ".join(cells) + f" | {'SLOWER' if again['slower'] else 'yes'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[],
                        help="a SavedModel or Model folder to optimize too, repeatable")
    parser.add_argument("--no-reference", action="store_true",
                        help="only the --model folders, not the reference models")
    parser.add_argument("--time-budget", type=float, default=DEFAULT_TIME_BUDGET_S)
    parser.add_argument("--retime-budget", type=float, default=30.0)
    parser.add_argument("--opt-in", action="store_true",
                        help="also every candidate (XLA, TFLite: experimental server flags)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    probe = detect.probe()
    runs = {"default": None, **({"opt_in": tuple(CPU_CANDIDATES)} if args.opt_in else {})}
    rows = {run: [] for run in runs}
    with tempfile.TemporaryDirectory() as tmp:
        models = {} if args.no_reference else reference_models(tmp)
        models.update({os.path.basename(m.rstrip("/")): m for m in args.model})
        for name, model_dir in models.items():
            for run, candidates in runs.items():
                config = OptimizerConfig(time_budget_s=args.time_budget, candidates=candidates)
                rows[run].append(run_one(name, model_dir, os.path.join(tmp, f"{name}_{run}"),
                                         config, probe, args.retime_budget))
    for run, label in (("default", "Default candidates (no experimental TF Serving flag)"),
                       ("opt_in", "Opt-in: every candidate (experimental server flags)")):
        if rows.get(run):
            print(f"{label}:\n\n{table(rows[run])}\n")
            for r in rows[run]:
                print(f"- {r['model']}: {r['decision']}")
            print()
    print(f"TensorRT: {'ran' if probe.can_run_tensorrt else 'not used: ' + probe.why_not()}")
    if args.json:
        print(json.dumps(rows, sort_keys=True))
    return 1 if any(r["retimed"]["slower"] for run in rows.values() for r in run) else 0


if __name__ == "__main__":
    sys.exit(main())
