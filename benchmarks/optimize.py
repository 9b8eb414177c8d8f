"""Optimizer benchmark: original vs optimized p50/p99 at batch 1 and 32.

For each of the importer's reference models (tfx_bridge.pipelines.demo_models):
import it, run TrtOptimizer's core (on this CPU host: the measured XLA /
frozen-XLA / Grappler candidates), then time original and kept model side by
side in this process on the same inputs. Target on CPU (issue 5): optimized
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
            # Re-time original and kept model back to back on the same inputs.
            orig = tf.saved_model.load(os.path.join(model_dir, "Format-Serving"))
            kept = tf.saved_model.load(os.path.join(out, "Format-Serving"))
            row = {"model": name, "backend": result.backend,
                   "candidate": result.report["candidate"], "blessed": result.blessed}
            for b in (1, 32):
                feeds = {k: tf.constant(v) for k, v in convert.make_inputs(specs, b).items()}
                before = optimize.measure(orig.signatures["serving_default"], feeds,
                                          args.iterations)
                after = optimize.measure(kept.signatures["serving_default"], feeds,
                                         args.iterations)
                row[f"b{b}"] = {"p50_before": before.p50_ms, "p99_before": before.p99_ms,
                                "p50_after": after.p50_ms, "p99_after": after.p99_ms,
                                "ratio": after.p50_ms / before.p50_ms}
            rows.append(row)
    print("| model | kept | p50 b1 before -> after (ms) | p99 b1 | p50 b32 before -> after "
          "(ms) | p99 b32 | p50 ratio b1 / b32 |\n|---|---|---|---|---|---|---|")
    for r in rows:
        b1, b32 = r["b1"], r["b32"]
        print(f"| {r['model']} | {r['candidate']} ({r['backend']}) | "
              f"{b1['p50_before']:.3f} -> {b1['p50_after']:.3f} | "
              f"{b1['p99_before']:.3f} -> {b1['p99_after']:.3f} | "
              f"{b32['p50_before']:.3f} -> {b32['p50_after']:.3f} | "
              f"{b32['p99_before']:.3f} -> {b32['p99_after']:.3f} | "
              f"{b1['ratio']:.2f} / {b32['ratio']:.2f} |")
    print(f"\nTensorRT: {'ran' if probe.can_run_tensorrt else 'not used: ' + probe.why_not()}")
    if args.json:
        print(json.dumps(rows, sort_keys=True))


if __name__ == "__main__":
    main()
