"""Session::Run with an inter-op pool against each call in its calling thread.

TF Serving's session (a TF1 DirectSession) hands every node of a call to its
inter-op pool; with ``inter_op_parallelism_threads`` negative it runs them in the
thread that called. For each model of ``serving_latency.py``'s set given with
``--models`` (imported by our converter into that script's cache, as its ``ours``
row), and for a SavedModel holding one ``Mul`` (the per-call floor, beside
onnxruntime on the same ``Mul``), one child process (oneDNN off, the server's BFC
allocator) loads the SavedModel into one session per setting and times them in
interleaved rounds: ``--rounds`` rounds of ``--calls`` calls each (``make_callable``,
feeds made once), at each batch size of the model. Reported: the median over
rounds of each round's p50, and the rounds' lowest and highest (the spread).

Adds the run to benchmarks/results/session_threads.json (earlier runs kept) and
prints a markdown table.

    nice .venv/bin/python benchmarks/session_threads.py --models moe ranker \\
        [--rounds 7] [--cache DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import serving_latency  # noqa: E402
import serving_models  # noqa: E402

from tfx_bridge import child  # noqa: E402

RESULTS = os.path.join(BENCH_DIR, "results", "session_threads.json")
MARKER = "SESSION_THREADS "
FLOOR = "one_mul"
SETTINGS = {"pool": 0, "calling_thread": -1}  # inter-op threads (0: TF's default pool)
# Calls per round: enough for a stable median on a small model, few on a large one.
TARGET_ROUND_S = 0.05


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def child_main(name: str, folder: str, rounds: int) -> None:
    """Times ``folder``'s serving_default under every setting (in this process)."""
    import numpy as np
    import tensorflow as tf

    from tfx_bridge.artifacts import tensorspec

    if name == FLOOR:
        specs, batches = tensorspec.parse_input_specs(["x:float32:-1,16"]), (32,)
    else:
        entry = serving_models.MODELS[name]
        specs, batches = tensorspec.parse_input_specs(entry.inputs), entry.batches
    calls = {}
    for label, inter in SETTINGS.items():  # the pool's session first: it sizes TF's pool
        graph = tf.Graph()
        with graph.as_default():
            config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=inter)
            sess = tf.compat.v1.Session(graph=graph, config=config)
            meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], folder)
        sig = meta.signature_def["serving_default"]
        keys = sorted(sig.inputs)
        calls[label] = (sess.make_callable([sig.outputs[k].name for k in sorted(sig.outputs)],
                                           [sig.inputs[k].name for k in keys]), keys)
    if name == FLOOR:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = 2, 1
        session = ort.InferenceSession(os.path.join(os.path.dirname(folder), "one_mul.onnx"),
                                       options, providers=["CPUExecutionProvider"])
        calls["onnxruntime"] = (lambda x: session.run(None, {"x": x}), ["x"])
    out = {}
    for batch in batches:
        feeds = tensorspec.make_inputs(specs, batch)
        fns = {label: (lambda fn=fn, args=[feeds[k] for k in keys]: fn(*args))
               for label, (fn, keys) in calls.items()}
        first = {label: fn() for label, fn in fns.items()}
        ref = first["pool"]
        for label, got in first.items():
            if label != "onnxruntime":  # the same graph: the same outputs
                for a, b in zip(ref, got, strict=True):
                    np.testing.assert_allclose(np.asarray(a, np.float64),
                                               np.asarray(b, np.float64), atol=1e-5)
        start = time.perf_counter()
        fns["pool"]()
        per_round = max(3, int(TARGET_ROUND_S / max(time.perf_counter() - start, 1e-6)))
        medians = {label: [] for label in fns}
        order = list(fns)
        for r in range(rounds):
            for label in order[r % len(order):] + order[:r % len(order)]:
                times = []
                for _ in range(per_round):
                    t = time.perf_counter()
                    fns[label]()
                    times.append((time.perf_counter() - t) * 1e3)
                medians[label].append(statistics.median(times))
        out[str(batch)] = {label: {"p50_ms": statistics.median(m), "low": min(m),
                                   "high": max(m), "calls_per_round": per_round}
                           for label, m in medians.items()}
    print(MARKER + json.dumps(out), flush=True)


def floor_model(cache: str) -> str:
    """A SavedModel and an ONNX file holding one ``Mul`` of a [batch, 16] input."""
    folder = os.path.join(cache, FLOOR, "saved_model")
    if os.path.exists(folder):
        return folder
    import onnx
    import tensorflow as tf
    from onnx import TensorProto, helper

    class OneMul(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * 2.0}

    module = OneMul()
    tf.saved_model.save(module, folder, signatures={"serving_default": module.serve})
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])], "one_mul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 16])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(cache, FLOOR, "one_mul.onnx"))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["moe", "ranker"],
                        help=f"a subset of: {' '.join(serving_models.MODELS)}")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cache", default=serving_latency.DEFAULT_CACHE)
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child[0], args.child[1], args.rounds)
        return
    unknown = [n for n in args.models if n not in serving_models.MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(serving_models.MODELS)}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **child.SERVING_CPU_ENV)
    results = {}
    for name in [FLOOR] + list(args.models):
        if name == FLOOR:
            folder = floor_model(args.cache)
        else:
            serving_latency.export(name, args.cache)
            prepared = serving_latency.prepared(name, "ours", args.cache, 3600)
            if "dir" not in prepared:
                results[name] = {"error": prepared.get("error")}
                continue
            folder = prepared["dir"]
        log(f"{name}: timing")
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name,
                               folder, "--rounds", str(args.rounds)], capture_output=True,
                              text=True, env=env, timeout=3600)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)), None)
        results[name] = (json.loads(line[len(MARKER):]) if line else
                         {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]})
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    runs = []  # earlier runs stay: the figures of docs/BENCHMARKS.md cite more than one
    if os.path.exists(args.results):
        with open(args.results) as f:
            runs = json.load(f).get("runs", [])
    runs.append({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "rounds": args.rounds, "load": os.getloadavg(), "models": results})
    with open(args.results, "w") as f:
        json.dump({"runs": runs}, f, indent=1, sort_keys=True)
    print("| model, batch | " + " | ".join(SETTINGS) + " | onnxruntime |")
    print("|---|---|---|---|")
    for name, row in results.items():
        for batch, cells in (row.items() if "error" not in row else []):
            shown = [f"{c['p50_ms']:.4g} ({c['low']:.4g}-{c['high']:.4g})" if c else "-"
                     for c in (cells.get(k) for k in [*SETTINGS, "onnxruntime"])]
            print(f"| {name}, {batch} | " + " | ".join(shown) + " |")
        if "error" in row:
            print(f"| {name} | {row['error']} | | |")


if __name__ == "__main__":
    main()
