"""Optimizer benchmark: original vs optimized p50/p99 at batch 1 and 32.

For each of the importer's reference models (tfx_bridge.pipelines.demo_models):
import it, run TrtOptimizer's core with its default candidates (on this CPU
host: only what stock TF Serving serves without experimental flags), then time
original and kept model side by side in this process on the same inputs. A
second run opts in to every candidate (XLA and TFLite, which need TF Serving's
experimental --xla_cpu_compilation_enabled / --prefer_tflite_model), timed the
same way, each model through the runtime its server would use (TFLite's
interpreter for a TFLite choice). The original is
also timed through a TF1 Session, TF Serving's own path, to show the per-call
floor of TF graphs on this host. Target on CPU: optimized
p50 <= 0.75x the original at batch 1 and 32; without experimental flags there
may be nothing faster, and the report says so. Figures go into docs/BENCHMARKS.md.

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
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig  # noqa: E402
from tfx_bridge.components.trt_optimizer import detect, measure, optimize  # noqa: E402
from tfx_bridge.components.trt_optimizer.candidates import CPU_CANDIDATES  # noqa: E402
from tfx_bridge.components.trt_optimizer.config import OptimizerConfig  # noqa: E402
from tfx_bridge.pipelines import demo_models  # noqa: E402

ALL_CANDIDATES = list(CPU_CANDIDATES)


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
        latency = measure.measure(lambda **kw: call(*[kw[n] for n in names]), feeds,
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
            convert.import_model(ImporterConfig(
                source_kind="state_dict", source_path=weights,
                module_class=f"tfx_bridge.pipelines.demo_models:{cls.__name__}",
                module_kwargs=kwargs, inputs=inputs, output_names=outputs), model_dir)
            out = os.path.join(tmp, name + "_opt")
            orig_dir = os.path.join(model_dir, "Format-Serving")
            orig = measure.load_servable(orig_dir)
            row = {"model": name}
            for run, candidates in (("default", None), ("opt_in", ALL_CANDIDATES)):
                result = optimize.optimize(model_dir, f"{out}_{run}", OptimizerConfig(
                    iterations=args.iterations, candidates=candidates), probe=probe)
                # Re-time original and kept model back to back on the same inputs, each
                # as its server would run it (the kept one under its serving flags).
                kept = measure.load_servable(os.path.join(f"{out}_{run}", "Format-Serving"),
                                              result.serving_flags)
                entry = {"backend": result.backend, "candidate": result.report["candidate"],
                         "blessed": result.blessed, "serving_flags": result.serving_flags}
                for b in (1, 32):
                    feeds = signature.make_inputs(specs, b)
                    timed = measure.measure_interleaved(
                        {"before": (orig.call, orig.prepare(feeds)),
                         "after": (kept.call, kept.prepare(feeds))}, args.iterations)
                    before, after = timed["before"], timed["after"]
                    entry[f"b{b}"] = {"p50_before": before.p50_ms, "p99_before": before.p99_ms,
                                      "p50_after": after.p50_ms, "p99_after": after.p99_ms,
                                      "ratio": after.p50_ms / before.p50_ms}
                    if run == "default":
                        entry[f"b{b}"]["p50_session"] = session_p50(orig_dir, feeds,
                                                                    args.iterations)
                row[run] = entry
            rows.append(row)
    print("Default candidates (no experimental TF Serving flag):\n\n"
          "| model | kept | p50 b1 before -> after (ms) | p99 b1 | p50 b32 before -> after "
          "(ms) | p99 b32 | p50 ratio b1 / b32 | original via Session::Run p50 b1 / b32 |"
          "\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        d = r["default"]
        b1, b32 = d["b1"], d["b32"]
        print(f"| {r['model']} | {d['candidate']} ({d['backend']}) | "
              f"{b1['p50_before']:.3f} -> {b1['p50_after']:.3f} | "
              f"{b1['p99_before']:.3f} -> {b1['p99_after']:.3f} | "
              f"{b32['p50_before']:.3f} -> {b32['p50_after']:.3f} | "
              f"{b32['p99_before']:.3f} -> {b32['p99_after']:.3f} | "
              f"{b1['ratio']:.2f} / {b32['ratio']:.2f} | "
              f"{b1['p50_session']:.3f} / {b32['p50_session']:.3f} |")
    print("\nOpt-in: every candidate (XLA, TFLite; experimental server flags):\n\n"
          "| model | kept | server flags | p50 b1 before -> after (ms) | p50 b32 before -> "
          "after (ms) | p50 ratio b1 / b32 |\n|---|---|---|---|---|---|")
    for r in rows:
        o = r["opt_in"]
        print(f"| {r['model']} | {o['candidate']} ({o['backend']}) | "
              f"{' '.join(o['serving_flags']) or '-'} | "
              f"{o['b1']['p50_before']:.3f} -> {o['b1']['p50_after']:.3f} | "
              f"{o['b32']['p50_before']:.3f} -> {o['b32']['p50_after']:.3f} | "
              f"{o['b1']['ratio']:.2f} / {o['b32']['ratio']:.2f} |")
    print(f"\nTensorRT: {'ran' if probe.can_run_tensorrt else 'not used: ' + probe.why_not()}")
    if args.json:
        print(json.dumps(rows, sort_keys=True))


if __name__ == "__main__":
    main()
