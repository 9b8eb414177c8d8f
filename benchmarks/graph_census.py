"""Graph census of our converter's served graphs: transposes and fused convolutions.

For torchvision resnet18, resnet50, mobilenet_v3_small, efficientnet_b0 and the
layout-moving or grouped ones (shufflenet_v2_x1_0's channel shuffle,
resnext50_32x4d's and regnet_y_400mf's grouped convolutions, convnext_tiny's and
swin_t's permutes) (``weights=None``, exported with ``torch.onnx.export`` at opset 17 with a dynamic
batch, cached under /tmp/graph_census/onnx/), each converter source given with
``--source NAME=DIR`` (a folder holding the converter package, as ``onnx_tf/`` in a
checkout; default ``after`` = this checkout's) converts the model in a child process
with oneDNN off (``TF_ENABLE_ONEDNN_OPTS=0``, stock TF Serving's CPU kernels) and
saves a SavedModel. The child then loads it the way TF Serving runs it (a TF1
Session over ``serving_default``, Grappler on, the remapper included) and counts
the ops of the partition graphs the Session executes: Transpose, the convolutions
TF's CPU remapper fused (``_FusedConv2D``, with the ops fused into it) and those
left unfused (``Conv2D``, ``DepthwiseConv2dNative``: TF's remapper fuses depthwise
convolutions only in oneDNN builds), ``_FusedMatMul`` vs ``MatMul``.

With ``--time`` a second child per model (oneDNN off) loads every source's
SavedModel and an onnxruntime session (CPU, 2 intra-op threads) and times them
interleaved: ``--rounds`` rounds, each ``--iterations`` calls per backend after
warm-up, at batch 1 and 32; reported: the median over rounds of each round's p50,
and the rounds' lowest and highest p50 (the spread).

Writes benchmarks/results/graph_census.jsonl (one line per model and source) and
prints a markdown table.

    nice .venv/bin/python benchmarks/graph_census.py [--only resnet18 ...]
        [--source before=/tmp/base] [--time --rounds 5 --iterations 20]
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)
RESULTS = os.path.join(BENCH_DIR, "results", "graph_census.jsonl")
CACHE = "/tmp/graph_census"
MODELS = ("resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0",
          "shufflenet_v2_x1_0", "resnext50_32x4d", "regnet_y_400mf", "convnext_tiny",
          "swin_t")
TIMED = ("resnet18", "mobilenet_v3_small")
BATCHES = (1, 32)
MARKER = "GRAPH_CENSUS "
CHILD_TIMEOUT_S = 1800


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def export(name: str) -> str:
    """The model's ONNX file, exported once (opset 17, dynamic batch).

    BatchNorm statistics and zero biases are drawn first
    (``serving_models.trained_like``).
    """
    path = os.path.join(CACHE, "onnx", f"{name}.onnx")
    if os.path.exists(path):
        return path
    import serving_models
    import torch
    import torchvision

    os.makedirs(os.path.dirname(path), exist_ok=True)
    model = getattr(torchvision.models, name)(weights=None).eval()
    serving_models.trained_like(model)
    tmp = path + ".part"
    with torch.no_grad():
        torch.onnx.export(model, torch.randn(1, 3, 224, 224), tmp, opset_version=17,
                          input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- children


def _use_source(source_dir: str) -> None:
    """Makes ``tfx_bridge.onnx_tf`` the converter package in ``source_dir``."""
    import tfx_bridge

    init = os.path.join(source_dir, "__init__.py")
    spec = importlib.util.spec_from_file_location(
        "tfx_bridge.onnx_tf", init, submodule_search_locations=[source_dir])
    module = importlib.util.module_from_spec(spec)
    sys.modules["tfx_bridge.onnx_tf"] = module
    tfx_bridge.onnx_tf = module
    spec.loader.exec_module(module)


def _session_ops(saved_model_dir: str, batch: int = 1) -> collections.Counter:
    """Op counts (and _FusedConv2D/_FusedMatMul by fused ops) of the partition graphs a
    TF1 Session executes for serving_default: TF Serving's path, after Grappler."""
    import numpy as np
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        session = tf.compat.v1.Session(graph=graph)
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], saved_model_dir)
        sig = meta.signature_def["serving_default"]
        feeds = {}
        for info in sig.inputs.values():
            dims = [d.size if d.size >= 0 else batch for d in info.tensor_shape.dim]
            feeds[info.name] = np.random.default_rng(0).standard_normal(dims).astype(
                np.float32)
        metadata = tf.compat.v1.RunMetadata()
        session.run([o.name for o in sig.outputs.values()], feeds,
                    options=tf.compat.v1.RunOptions(output_partition_graphs=True),
                    run_metadata=metadata)
        session.close()
    counts: collections.Counter = collections.Counter()
    for partition in metadata.partition_graphs:
        nodes = list(partition.node)
        for function in partition.library.function:
            nodes.extend(function.node_def)
        for node in nodes:
            counts[node.op] += 1
            if node.op in ("_FusedConv2D", "_FusedMatMul"):
                fused = "+".join(s.decode() for s in node.attr["fused_ops"].list.s)
                counts[f"{node.op}[{fused}]"] += 1
    return counts


def census_child(spec: dict) -> None:
    """Converts and saves one model with one source; prints its census."""
    if spec["source_dir"]:
        _use_source(spec["source_dir"])
    import tensorflow as tf

    from tfx_bridge.onnx_tf import convert, load_for_conversion, save

    start = time.perf_counter()
    converted = convert(load_for_conversion(spec["onnx"]))
    save(converted, spec["out"])
    convert_s = time.perf_counter() - start
    saved = tf.saved_model.load(spec["out"]).signatures["serving_default"].graph.as_graph_def()
    saved_transposes = sum(n.op == "Transpose" for n in saved.node) + sum(
        n.op == "Transpose" for f in saved.library.function for n in f.node_def)
    ops = _session_ops(spec["out"])
    fused = {k: v for k, v in ops.items() if k.startswith("_Fused") and "[" in k}
    row = {"convert_s": round(convert_s, 1), "transposes_saved": saved_transposes,
           "transposes_served": ops["Transpose"],
           "conv_fused": ops["_FusedConv2D"], "conv_unfused": ops["Conv2D"],
           "depthwise_unfused": ops["DepthwiseConv2dNative"],
           "matmul_fused": ops["_FusedMatMul"], "matmul_unfused": ops["MatMul"],
           "fused_by_ops": fused, "pads_served": ops["Pad"] + ops["PadV2"]}
    print(MARKER + json.dumps(row), flush=True)


def time_child(spec: dict) -> None:
    """Times every SavedModel of one model and onnxruntime, interleaved."""
    import numpy as np
    import onnxruntime as ort
    import tensorflow as tf

    fns = {name: tf.saved_model.load(path).signatures["serving_default"]
           for name, path in spec["saved"].items()}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(spec["onnx"], options, providers=["CPUExecutionProvider"])
    out: dict = {}
    for batch in BATCHES:
        x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(
            np.float32)
        xt = tf.constant(x)
        calls = {name: (lambda f=fn, v=xt: f(x=v)) for name, fn in fns.items()}
        calls["onnxruntime"] = lambda v=x: session.run(None, {"x": v})
        reference = session.run(None, {"x": x})[0]
        for name, fn in fns.items():
            got = list(fn(x=xt).values())[0].numpy()
            out.setdefault("max_abs_vs_ort", {}).setdefault(name, {})[str(batch)] = float(
                np.max(np.abs(got - reference)))
        for call in calls.values():
            for _ in range(spec["warmup"]):
                call()
        p50s: dict = {name: [] for name in calls}
        for _ in range(spec["rounds"]):
            for name, call in calls.items():
                lat = []
                for _ in range(spec["iterations"]):
                    start = time.perf_counter()
                    call()
                    lat.append((time.perf_counter() - start) * 1000)
                p50s[name].append(statistics.median(lat))
        for name, values in p50s.items():
            out.setdefault("p50_ms", {}).setdefault(name, {})[str(batch)] = {
                "median": round(statistics.median(values), 2),
                "min": round(min(values), 2), "max": round(max(values), 2)}
    print(MARKER + json.dumps(out), flush=True)


def run_child(mode: str, spec: dict) -> dict:
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), f"--{mode}-child",
                           json.dumps(spec)], capture_output=True, text=True, env=env,
                          timeout=CHILD_TIMEOUT_S)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARKER)),
                None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{mode} child exit {proc.returncode}: {tail[:300]}")
    return json.loads(line[len(MARKER):])


# --------------------------------------------------------------------------- parent


def table(rows) -> str:
    lines = ["| model | source | Transposes saved / served | Conv2D fused / unfused | "
             "depthwise (unfused) | MatMul fused / unfused | Pad served |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['source']} | {r['transposes_saved']} / "
                     f"{r['transposes_served']} | {r['conv_fused']} / {r['conv_unfused']} | "
                     f"{r['depthwise_unfused']} | {r['matmul_fused']} / "
                     f"{r['matmul_unfused']} | {r['pads_served']} |")
    return "\n".join(lines)


def timing_table(timed) -> str:
    lines = ["| model | backend | b1 p50 ms (spread) | b32 p50 ms (spread) |",
             "|---|---|---|---|"]
    for model, result in timed.items():
        for backend, by_batch in result["p50_ms"].items():
            cells = [f"{v['median']} ({v['min']}-{v['max']})"
                     for v in (by_batch[str(b)] for b in BATCHES)]
            lines.append(f"| {model} | {backend} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, choices=MODELS)
    parser.add_argument("--source", action="append", default=[],
                        help="NAME=DIR: a converter package folder to census as NAME")
    parser.add_argument("--time", action="store_true",
                        help=f"also time {', '.join(TIMED)} against onnxruntime")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--census-child", help=argparse.SUPPRESS)
    parser.add_argument("--time-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.census_child:
        return census_child(json.loads(args.census_child))
    if args.time_child:
        return time_child(json.loads(args.time_child))

    sources = {"after": ""}
    for item in args.source:
        name, _, folder = item.partition("=")
        sources[name] = os.path.abspath(folder)
    rows = []
    timed = {}
    for model in args.only or MODELS:
        onnx_path = export(model)
        saved = {}
        for source, folder in sorted(sources.items(), key=lambda kv: kv[0] != "before"):
            out = os.path.join(CACHE, "saved", f"{model}-{source}")
            subprocess.run(["rm", "-rf", out], check=True)
            log(f"{model}: converting with {source}")
            row = run_child("census", {"onnx": onnx_path, "out": out, "source_dir": folder})
            rows.append({"model": model, "source": source, **row})
            saved[source] = out
        if args.time and model in TIMED:
            log(f"{model}: timing {', '.join(saved)} and onnxruntime")
            timed[model] = run_child("time", {
                "onnx": onnx_path, "saved": saved, "rounds": args.rounds,
                "iterations": args.iterations, "warmup": args.warmup})
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    load = os.getloadavg()
    with open(RESULTS, "a") as f:
        stamp = time.strftime("%Y-%m-%d %H:%M")
        for row in rows:
            f.write(json.dumps({"written": stamp, "load": load, **row}) + "\n")
        for model, result in timed.items():
            f.write(json.dumps({"written": stamp, "load": load, "model": model,
                                "timing": result, "rounds": args.rounds,
                                "iterations": args.iterations}) + "\n")
    print(table(rows))
    if timed:
        print()
        print(timing_table(timed))
    print(f"\nload average at the end: {' '.join(f'{v:.2f}' for v in load)}")


if __name__ == "__main__":
    main()
