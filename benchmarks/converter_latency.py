"""Converter latency: our converter's served graph against onnx2tf's, CPU, same run.

For each model of the importer's test zoo (tests/components/pytorch_model_importer/zoo.py)
and each reference model in tfx_bridge.pipelines.demo_models:

1. import it twice, ``converter="tfx-bridge"`` (ONNX's NCHW layout kept, TF's NHWC
   Conv/pool kernels wrapped in local transposes) and ``converter="onnx2tf"`` (the
   whole graph NHWC), both artifacts in a temp dir; a pair is timed only when both
   imports are blessed (the importer's equivalence check);
2. run TrtOptimizer's core (``optimize.optimize``, CPU path, default candidates:
   what stock TF Serving serves without experimental flags) on our Model folder;
3. in a fresh child process with ``TF_ENABLE_ONEDNN_OPTS=0`` (stock TF Serving CPU
   kernels; ``--onednn`` adds a second child with oneDNN on), load the three
   ``serving_default`` signatures (ours, onnx2tf's, ours after TrtOptimizer) and time
   them interleaved on the same inputs: p50 of ``--iterations`` calls after
   ``--warmup`` warm-ups, batch 1 and 32, inter/intra-op threads left default;
4. count the Transpose ops of each served graph: as saved (reachable from
   serving_default, per call site, nested functions included) and as TF Serving runs
   it (the partition graphs a TF1 Session executes after Grappler).

Writes benchmarks/results/converter_latency.md (tables and why, laid out by
converter_latency_report.py) and benchmarks/results/converter_latency.jsonl (one
JSON line per model); progress on stderr.

    nice -n 10 .venv/bin/python benchmarks/converter_latency.py [--only NAME ...]
        [--iterations 50] [--warmup 5] [--onednn] [--opt-iterations 50] [--jobs 2]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from converter_latency_report import BATCHES, write_markdown

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(BENCH_DIR, "results")
OUT_MD = os.path.join(RESULTS_DIR, "converter_latency.md")
OUT_JSONL = os.path.join(RESULTS_DIR, "converter_latency.jsonl")
ZOO_DIR = os.path.join(BENCH_DIR, os.pardir, "tests", "components", "pytorch_model_importer")
ZOO_MODELS = ["conv_pool_flatten", "resnet", "mobilenet_v3", "efficientnet",
              "transformer_encoder", "bert", "dlrm", "lstm_gru", "text_cnn"]
CHILD_MARKER = "CONVERTER_LATENCY "
CHILD_TIMEOUT_S = 900


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- child


def _func_counts(graph_def, op: str) -> int:
    """``op`` nodes reachable from ``graph_def``'s nodes, per call site: a function
    called twice counts twice (a While body once)."""
    lib = {f.signature.name: f for f in graph_def.library.function}
    memo: dict = {}

    def in_nodes(nodes) -> int:
        total = 0
        for n in nodes:
            total += n.op == op
            if n.op in lib:
                total += in_function(n.op)
            for a in n.attr.values():
                if a.HasField("func"):
                    total += in_function(a.func.name)
                elif a.HasField("list"):
                    total += sum(in_function(f.name) for f in a.list.func)
        return total

    def in_function(name: str) -> int:
        if name not in lib:
            return 0
        if name not in memo:
            memo[name] = 0  # recursion guard
            memo[name] = in_nodes(lib[name].node_def)
        return memo[name]

    return in_nodes(graph_def.node)


def _served_counts(saved_model_dir: str, feeds, op: str) -> int:
    """``op`` nodes in the graphs a TF1 Session runs for serving_default (TF Serving's
    path: Session::Run), after Grappler and function inlining."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        session = tf.compat.v1.Session(graph=graph)
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], saved_model_dir)
        sig = meta.signature_def["serving_default"]
        options = tf.compat.v1.RunOptions(output_partition_graphs=True)
        metadata = tf.compat.v1.RunMetadata()
        session.run([sig.outputs[k].name for k in sorted(sig.outputs)],
                    {sig.inputs[n].name: v for n, v in feeds.items()},
                    options=options, run_metadata=metadata)
        session.close()
    return sum(_func_counts(g, op) for g in metadata.partition_graphs)


def time_child(spec: dict) -> None:
    """Loads each SavedModel's serving_default and times them interleaved; prints one
    ``CONVERTER_LATENCY {json}`` line."""
    import numpy as np

    from tfx_bridge.components.pytorch_model_importer import signature
    from tfx_bridge.components.trt_optimizer import measure

    specs = signature.parse_input_specs(spec["inputs"])
    servables = {name: measure.load_servable(path, spec.get("flags", {}).get(name, ()))
                 for name, path in spec["models"].items()}
    out: dict = {"onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS"), "p50_ms": {},
                 "p99_ms": {}, "max_abs_vs_ours": {}}
    for b in spec["batches"]:
        feeds = signature.make_inputs(specs, b)
        calls = {name: (s.call, s.prepare(feeds)) for name, s in servables.items()}
        reference = servables["ours"].outputs(feeds)
        for name, s in servables.items():
            got = s.outputs(feeds)
            out["max_abs_vs_ours"].setdefault(name, {})[str(b)] = max(
                float(np.max(np.abs(reference[k].astype(np.float64)
                                    - got[k].astype(np.float64)))) if reference[k].size else 0.0
                for k in reference)
        timed = measure.measure_interleaved(calls, spec["iterations"],
                                             rounds=spec["rounds"], warmup=spec["warmup"])
        for name, lat in timed.items():
            out["p50_ms"].setdefault(name, {})[str(b)] = round(lat.p50_ms, 4)
            out["p99_ms"].setdefault(name, {})[str(b)] = round(lat.p99_ms, 4)
    if spec.get("count"):
        import tensorflow as tf

        feeds = signature.make_inputs(specs, 1)
        out["transposes"] = {}
        for name, path in spec["models"].items():
            fn = tf.saved_model.load(path).signatures["serving_default"]
            saved = _func_counts(fn.graph.as_graph_def(), "Transpose")
            try:
                served = _served_counts(path, feeds, "Transpose")
            except Exception as e:  # noqa: BLE001  (reported, not fatal)
                served = f"error: {str(e).splitlines()[0][:80]}"
            out["transposes"][name] = {"saved": saved, "served": served}
    print(CHILD_MARKER + json.dumps(out), flush=True)


def run_time_child(spec: dict, onednn: bool) -> dict:
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1" if onednn else "0",
               TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--time-child",
                           json.dumps(spec)], capture_output=True, text=True, env=env,
                          timeout=CHILD_TIMEOUT_S)
    line = next((ln for ln in reversed(proc.stdout.splitlines())
                 if ln.startswith(CHILD_MARKER)), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"timing child exit {proc.returncode}: {tail[:200]}")
    return json.loads(line[len(CHILD_MARKER):])


# --------------------------------------------------------------------------- parent


def _models(only):
    import reference_models

    from tfx_bridge.pipelines import demo_models

    sys.path.insert(0, os.path.abspath(ZOO_DIR))
    import zoo

    out = {}
    for name in ZOO_MODELS:
        entry = zoo.ZOO[name]
        out[name] = (entry.inputs, entry.outputs, lambda folder, n=name: zoo.hand_over(n, folder))
    for name, (_, _, inputs, outputs) in demo_models.REFERENCE_MODELS.items():
        out[f"ref_{name}"] = (inputs, outputs,
                              lambda folder, n=name: reference_models.hand_over(n, folder))
    return {k: v for k, v in out.items() if not only or k in only}


def prepare_model(name, args, tmp) -> dict:
    """Imports ``name`` with both converters into ``tmp`` and runs TrtOptimizer's core on
    ours; the row so far, with the three serving folders under ``"dirs"``."""
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.trt_optimizer import optimize
    from tfx_bridge.components.trt_optimizer.config import OptimizerConfig
    from tfx_bridge.errors import short_message

    inputs, outputs, source = _models([name])[name]
    row = _reuse(name, inputs, tmp)
    if row is not None:
        log(f"{name}: reusing the imports and TrtOptimizer output in {tmp}")
        return row
    row = {"model": name, "inputs": inputs}
    dirs = {}
    for variant, converter in (("ours", "tfx-bridge"), ("onnx2tf", "onnx2tf")):
        folder = os.path.join(tmp, variant)
        os.makedirs(folder, exist_ok=True)
        start = time.perf_counter()
        try:
            config = ImporterConfig.of_source(source(folder), inputs, outputs,
                                              converter=converter)
            result = convert.import_model(config, os.path.join(folder, "model"))
            row[variant] = {"blessed": result.blessed, "converter": result.report["converter"],
                            "max_abs_error": result.report["max_abs_error"]}
            dirs[variant] = os.path.join(folder, "model")
        except Exception as e:  # noqa: BLE001  (a refusal is a recorded row)
            row[variant] = {"blessed": False, "error": short_message(e)[:160]}
        row[variant]["import_s"] = round(time.perf_counter() - start, 1)
        log(f"{name}: {variant} import {row[variant]['import_s']}s blessed="
            f"{row[variant]['blessed']} {row[variant].get('error', '')}")
    if not (row["ours"]["blessed"] and row["onnx2tf"]["blessed"]):
        row["skipped"] = "not blessed by both converters"
        return row
    opt_dir = os.path.join(tmp, "optimized")
    start = time.perf_counter()
    result = optimize.optimize(dirs["ours"], opt_dir,
                               OptimizerConfig(iterations=args.opt_iterations))
    row["optimizer"] = {"candidate": result.report["candidate"], "backend": result.backend,
                        "blessed": result.blessed, "serving_flags": result.serving_flags,
                        "seconds": round(time.perf_counter() - start, 1),
                        "its_p50_before_ms": result.report["latency_before_ms"],
                        "its_p50_after_ms": result.report["latency_after_ms"]}
    log(f"{name}: TrtOptimizer kept {row['optimizer']['candidate']} "
        f"({row['optimizer']['seconds']}s)")
    row["dirs"] = {"ours": os.path.join(dirs["ours"], convert.SERVING_DIR),
                   "onnx2tf": os.path.join(dirs["onnx2tf"], convert.SERVING_DIR),
                   "optimized": os.path.join(opt_dir, convert.SERVING_DIR)}
    return row


def _reuse(name, inputs, tmp):
    """The row of a finished earlier preparation in ``tmp`` (``--work``), or None."""
    reports = {v: os.path.join(tmp, v, "model", "report.json") for v in ("ours", "onnx2tf")}
    reports["optimized"] = os.path.join(tmp, "optimized", "report.json")
    if not all(os.path.exists(p) for p in reports.values()):
        return None
    loaded = {v: json.load(open(p)) for v, p in reports.items()}
    row = {"model": name, "inputs": inputs, "reused": True}
    for v in ("ours", "onnx2tf"):
        r = loaded[v]
        row[v] = {"blessed": r["blessed"], "converter": r["converter"],
                  "max_abs_error": r["max_abs_error"]}
    o = loaded["optimized"]
    row["optimizer"] = {"candidate": o["candidate"], "backend": o["backend"],
                        "blessed": o["blessed"], "serving_flags": o["serving_flags"],
                        "seconds": o["seconds"], "its_p50_before_ms": o["latency_before_ms"],
                        "its_p50_after_ms": o["latency_after_ms"]}
    row["dirs"] = {"ours": os.path.join(tmp, "ours", "model", "Format-Serving"),
                   "onnx2tf": os.path.join(tmp, "onnx2tf", "model", "Format-Serving"),
                   "optimized": os.path.join(tmp, "optimized", "Format-Serving")}
    return row


def prepare_in_child(name, args, tmp) -> dict:
    """``prepare_model`` in a child process (a crash or a timeout is a recorded row)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--prepare-child", name, tmp,
           "--opt-iterations", str(args.opt_iterations)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "skipped": f"prepare timed out after {args.timeout}s",
                "ours": {"blessed": False}, "onnx2tf": {"blessed": False}}
    sys.stderr.write("".join(ln + "\n" for ln in proc.stderr.splitlines()
                             if ln.startswith("[")))
    line = next((ln for ln in reversed(proc.stdout.splitlines())
                 if ln.startswith(CHILD_MARKER)), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "skipped": f"prepare failed (exit {proc.returncode}): "
                f"{tail[:160]}", "ours": {"blessed": False}, "onnx2tf": {"blessed": False}}
    return json.loads(line[len(CHILD_MARKER):])


def time_model(row, args) -> dict:
    name = row["model"]
    spec = {"models": row.pop("dirs"), "flags": {"optimized": row["optimizer"]["serving_flags"]},
            "inputs": row["inputs"], "batches": list(BATCHES), "iterations": args.iterations,
            "rounds": args.rounds, "warmup": args.warmup}
    for onednn in ((False, True) if args.onednn else (False,)):
        key = "onednn_on" if onednn else "onednn_off"
        start = time.perf_counter()
        try:
            row[key] = run_time_child(dict(spec, count=not onednn), onednn)
        except Exception as e:  # noqa: BLE001
            row[key] = {"error": str(e)[:200]}
        p50 = row[key].get("p50_ms", {})
        log(f"{name}: timed {key} ({time.perf_counter() - start:.0f}s) "
            + " ".join(f"{v}={p50[v]['1']:.3f}/{p50[v]['32']:.3f}ms" for v in p50)
            + (f" transposes={row[key]['transposes']}" if "transposes" in row[key] else "")
            + (f" {row[key]['error']}" if "error" in row[key] else ""))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds the timed calls are split into")
    parser.add_argument("--opt-iterations", type=int, default=50,
                        help="iterations= for TrtOptimizer's own candidate timing")
    parser.add_argument("--onednn", action="store_true",
                        help="also time with oneDNN on (a second fresh child per model)")
    parser.add_argument("--md", default=OUT_MD)
    parser.add_argument("--jsonl", default=OUT_JSONL)
    parser.add_argument("--why", default=None,
                        help="a file whose text goes under '## Why' in the Markdown")
    parser.add_argument("--from-jsonl", action="store_true",
                        help="rewrite the Markdown from --jsonl (runs nothing)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="models imported and optimized at a time (timing is serial)")
    parser.add_argument("--timeout", type=int, default=1800,
                        help="seconds per model for imports and TrtOptimizer")
    parser.add_argument("--work", default=None,
                        help="keep the artifacts here (default: a temp dir, removed); "
                        "a model whose imports and TrtOptimizer output are there is reused")
    parser.add_argument("--time-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--prepare-child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time_child:
        time_child(json.loads(args.time_child))
        return
    if args.prepare_child:
        name, tmp = args.prepare_child
        print(CHILD_MARKER + json.dumps(prepare_model(name, args, tmp)), flush=True)
        return
    why = open(args.why).read().strip() if args.why else ""
    if args.from_jsonl:
        with open(args.jsonl) as f:
            records = [json.loads(ln) for ln in f if ln.strip()]
        meta = next((r for r in records if "run" in r), {"run": {"seconds": 0}})
        rows = [r for r in records if "model" in r]
        with open(args.md, "w") as f:
            f.write(write_markdown(rows, meta["run"]["seconds"], args, why))
        return
    start = time.perf_counter()
    names = list(_models(args.only))
    log(f"{len(names)} models: {', '.join(names)}; preparing {args.jobs} at a time")
    os.makedirs(os.path.dirname(os.path.abspath(args.jsonl)), exist_ok=True)
    rows = {}
    lock = threading.Lock()  # one timing child at a time
    with contextlib.ExitStack() as stack, open(args.jsonl, "w") as jsonl:
        tmp = args.work or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="converter-latency-"))

        # Each model: imports and TrtOptimizer in a child (``--jobs`` models at a time),
        # then its timing child, one timing child at a time.
        def one(name):
            row = prepare_in_child(name, args, os.path.join(tmp, name))
            with lock:
                if "skipped" not in row:
                    log(f"timing {name}")
                    row = time_model(row, args)
                rows[name] = row
                jsonl.write(json.dumps(row, sort_keys=True) + "\n")
                jsonl.flush()
                log(f"{len(rows)}/{len(names)} done ({(time.perf_counter() - start) / 60:.1f}"
                    " min)")

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(one, names))
        rows = [rows[n] for n in names]
        runtime = time.perf_counter() - start
        jsonl.write(json.dumps({"run": {"seconds": round(runtime, 1),
                                        "iterations": args.iterations,
                                        "warmup": args.warmup, "rounds": args.rounds,
                                        "jobs": args.jobs, "cpus": os.cpu_count()}}) + "\n")
    text = write_markdown(rows, runtime, args, why)
    with open(args.md, "w") as f:
        f.write(text)
    print(text)
    log(f"done in {runtime / 60:.1f} min; wrote {args.md} and {args.jsonl}")


if __name__ == "__main__":
    main()
