"""Optimizer benchmark: original vs optimized p50/p99 at batch 1 and 32.

For each of the importer's reference models (tfx_bridge.pipelines.demo_models):
import it, run TrtOptimizer's core (on this CPU host: the measured XLA /
frozen-XLA / Grappler / TFLite candidates), then time original and kept model
side by side in this process on the same inputs, each through the runtime its
server would use (TFLite's interpreter for a TFLite choice). The original is
also timed through a TF1 Session, TF Serving's own path, to show the per-call
floor of TF graphs on this host. Target on CPU (issue 5): optimized
p50 <= 0.75x the original at batch 1 and 32. Figures go into docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/optimize.py
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import convert, signature  # noqa: E402
from tfx_bridge.components.trt_optimizer import detect, optimize  # noqa: E402
from tfx_bridge.pipelines import demo_models  # noqa: E402

NO_TFLITE = [c for c in optimize.CPU_CANDIDATES if c != "tflite"]


def session_p50(saved_model_dir: str, feeds, iterations: int) -> float:
    """p50 of the original through a TF1 Session, as TF Serving runs a SavedModel
    (Session::Run on the signature's tensors): the per-call floor no TF graph
    rewrite removes."""
    graph = tf.Graph()
    with graph.as_default():
        session = tf.compat.v1.Session(graph=graph)
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], saved_model_dir)
        sig = meta.signature_def["serving_default"]
        names = sorted(sig.inputs)
        call = session.make_callable([sig.outputs[k].name for k in sorted(sig.outputs)],
                                     [sig.inputs[n].name for n in names])
        latency = optimize.measure(lambda **kw: call(*[kw[n] for n in names]), feeds,
                                   iterations)
        session.close()
    return latency.p50_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    probe = detect.probe()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (cls, kwargs, inputs, outputs) in demo_models.REFERENCE_MODELS.items():
            weights = os.path.join(tmp, f"{name}.pt")
            torch.save(demo_models.build(name).state_dict(), weights)
            specs = signature.parse_input_specs(inputs)
            model_dir = os.path.join(tmp, name)
            convert.import_model(convert.ModelSource(
                "state_dict", weights, f"tfx_bridge.pipelines.demo_models:{cls.__name__}",
                kwargs), specs, outputs, model_dir)
            out = os.path.join(tmp, name + "_opt")
            result = optimize.optimize(model_dir, out, iterations=args.iterations, probe=probe)
            # For fleets that do not run TF Serving's experimental TFLite path.
            no_lite = optimize.optimize(model_dir, out + "_nolite", iterations=args.iterations,
                                        probe=probe, candidates=NO_TFLITE).report
            ratios = [no_lite["latency_after_ms"][k] / no_lite["latency_before_ms"][k]
                      for k in ("p50_ms_batch_1", "p50_ms_batch_32")]
            # Re-time original and kept model back to back on the same inputs, each
            # as its server would run it (the kept one under its serving flags).
            orig_dir = os.path.join(model_dir, "Format-Serving")
            orig = optimize.load_servable(orig_dir)
            kept = optimize.load_servable(os.path.join(out, "Format-Serving"),
                                          result.serving_flags)
            row = {"model": name, "backend": result.backend,
                   "candidate": result.report["candidate"], "blessed": result.blessed,
                   "without_tflite": {"candidate": no_lite["candidate"], "ratios": ratios}}
            for b in (1, 32):
                feeds = convert.make_inputs(specs, b)
                timed = optimize.measure_interleaved(
                    {"before": (orig.call, orig.prepare(feeds)),
                     "after": (kept.call, kept.prepare(feeds))}, args.iterations)
                before, after = timed["before"], timed["after"]
                row[f"b{b}"] = {"p50_before": before.p50_ms, "p99_before": before.p99_ms,
                                "p50_after": after.p50_ms, "p99_after": after.p99_ms,
                                "p50_session": session_p50(orig_dir, feeds, args.iterations),
                                "ratio": after.p50_ms / before.p50_ms}
            rows.append(row)
    print("| model | kept | p50 b1 before -> after (ms) | p99 b1 | p50 b32 before -> after "
          "(ms) | p99 b32 | p50 ratio b1 / b32 | original via Session::Run p50 b1 / b32 |"
          "\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        b1, b32 = r["b1"], r["b32"]
        print(f"| {r['model']} | {r['candidate']} ({r['backend']}) | "
              f"{b1['p50_before']:.3f} -> {b1['p50_after']:.3f} | "
              f"{b1['p99_before']:.3f} -> {b1['p99_after']:.3f} | "
              f"{b32['p50_before']:.3f} -> {b32['p50_after']:.3f} | "
              f"{b32['p99_before']:.3f} -> {b32['p99_after']:.3f} | "
              f"{b1['ratio']:.2f} / {b32['ratio']:.2f} | "
              f"{b1['p50_session']:.3f} / {b32['p50_session']:.3f} |")
    print("\nWithout the TFLite candidate (optimizer's own measurement):\n\n"
          "| model | kept | p50 ratio b1 / b32 |\n|---|---|---|")
    for r in rows:
        w = r["without_tflite"]
        print(f"| {r['model']} | {w['candidate']} | {w['ratios'][0]:.2f} / "
              f"{w['ratios'][1]:.2f} |")
    print(f"\nTensorRT: {'ran' if probe.can_run_tensorrt else 'not used: ' + probe.why_not()}")
    if args.json:
        print(json.dumps(rows, sort_keys=True))


if __name__ == "__main__":
    main()
