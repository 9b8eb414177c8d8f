"""Served latency: the same ONNX through onnxruntime, torch eager, our SavedModel,
onnx2tf's SavedModel and TrtOptimizer's output, CPU, p50 per call.

For each model of serving_models.py (torchvision CNNs and ViT, BERT-shaped encoders,
a DLRM-shaped ranker, the demo's MoE, a 1-D audio CNN):

1. export it once to ONNX (opset 17, dynamic batch) with its ``state_dict`` beside it,
   cached under ``--cache`` (reused while the files are there);
2. import that ONNX the way ``tfx-bridge import-model --onnx`` does
   (``convert.import_model``), with our converter and with ``converter="onnx2tf"``
   (onnx2tf in its child process, on a copy), and run TrtOptimizer's
   ``optimize_local`` with its defaults on our Model folder; each in a child process,
   cached too;
3. start one fresh worker process per backend (serving_latency_worker.py; TF ones with
   ``TF_ENABLE_ONEDNN_OPTS=0`` and the CPU allocator the pusher's manifest gives TF
   Serving, BFC; ours once more with TF's default allocator, ``ours_malloc``), check
   every backend's outputs against onnxruntime's,
   then time interleaved rounds: each round runs every backend and timing path in a
   rotated order, one process at a time, the same feeds. TF backends are timed twice:
   the Python signature call and Session::Run of the signature's tensors (TF Serving's
   path), which separates Python's per-call cost from the graph's;
4. profile our SavedModel at the large batch (Session::Run with a full trace: time
   per op type, from RunMetadata step stats).

Batch sizes: 1 and 32 (the ranker: 1 and 512). p50 is the median of all timed calls;
the spread is the min and max of the rounds' medians.

Results merge into benchmarks/results/serving_latency.json (one entry per model, so a
subset can be rerun), and serving_latency_report.py writes the Markdown table to
benchmarks/results/serving_latency.md.

    nice -n 10 .venv/bin/python benchmarks/serving_latency.py [--models NAME ...]
        [--rounds 5] [--quick] [--cache DIR] [--extra LABEL=NAME:SAVEDMODEL ...]

``--extra`` times one more SavedModel (for example one written by an earlier
converter) as backend LABEL beside the others, for the model NAME.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import serving_latency_report as report  # noqa: E402
import serving_models  # noqa: E402
from serving_latency_worker import MARKER  # noqa: E402

from tfx_bridge import child, cpu_allocator  # noqa: E402

RESULTS = os.path.join(BENCH_DIR, "results", "serving_latency.json")
DEFAULT_CACHE = os.path.join(tempfile.gettempdir(), "tfx_bridge_serving_latency")
ROUND_S = 1.0  # target seconds per backend per round (at least MIN_CALLS calls)
MIN_CALLS, MAX_CALLS = 3, 200
TF_VARIANTS = ("ours", "onnx2tf", "optimized")
MALLOC_LABEL = "ours_malloc"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- preparation


def export(name: str, cache: str) -> str:
    """The model's ONNX (opset 17, dynamic batch) and state_dict under ``cache/name``."""
    import torch

    from tfx_bridge.artifacts import tensorspec
    from tfx_bridge.components.pytorch_model_importer.export import module_rewrites

    folder = os.path.join(cache, name)
    path = os.path.join(folder, "model.onnx")
    if os.path.exists(path) and os.path.exists(os.path.join(folder, "state.pt")):
        return path
    os.makedirs(folder, exist_ok=True)
    entry = serving_models.MODELS[name]
    model = serving_models.build(name)
    if entry.task == "detection":
        import catalog_detection

        catalog_detection.export_onnx(model, path + ".tmp", serving_models.DETECTOR_HW)
        torch.save(model.state_dict(), os.path.join(folder, "state.pt"))
        os.replace(path + ".tmp", path)
        return path
    feeds = tensorspec.make_inputs(tensorspec.parse_input_specs(entry.inputs), 2)
    names = [s.split(":")[0] for s in entry.inputs]
    # torch's fused attention kernel (taken under no_grad) has no ONNX export; the
    # same math unfused does, as the importer exports it (module_rewrites.py)
    with torch.no_grad(), module_rewrites.mha_fastpath_off():
        torch.onnx.export(model, tuple(torch.from_numpy(feeds[n]) for n in names),
                          path + ".tmp", input_names=names, output_names=entry.outputs,
                          dynamic_axes={n: {0: "batch"} for n in names + entry.outputs},
                          opset_version=17)
    torch.save(model.state_dict(), os.path.join(folder, "state.pt"))
    os.replace(path + ".tmp", path)
    return path


def prepare(name: str, variant: str, cache: str) -> dict:
    """Imports (``ours``, ``onnx2tf``) or optimizes (``optimized``) model ``name``; runs
    in a child process. The SavedModel folder, or the refusal."""
    from tfx_bridge import serving_threads
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.pytorch_model_importer.source import ModelSource
    from tfx_bridge.components.trt_optimizer import optimize

    entry = serving_models.MODELS[name]
    folder = os.path.join(cache, name)
    start = time.perf_counter()
    if variant == "optimized":
        result = optimize.optimize_local(os.path.join(folder, "ours"),
                                         os.path.join(folder, "optimized"))
        # The server's session threads as the pusher would set them from the report.
        session = result.report.get("session") or {}
        threads = (serving_threads.session_flags(session["intra_op_parallelism"],
                                                 session["inter_op_parallelism"])
                   if session.get("inter_op_parallelism") is not None else [])
        return {"dir": os.path.join(folder, "optimized", convert.SERVING_DIR),
                "flags": " ".join(result.serving_flags + threads), "backend": result.backend,
                "session": session.get("reason"),
                "candidate": result.report.get("candidate"), "blessed": result.blessed,
                "seconds": round(time.perf_counter() - start, 1)}
    converter = "tfx-bridge" if variant == "ours" else "onnx2tf"
    source = ModelSource("onnx", os.path.join(folder, "model.onnx"))
    if entry.task == "detection":
        config = ImporterConfig.of_source(source, entry.inputs, [], task="detection",
                                          max_detections=entry.detections)
    else:
        config = ImporterConfig.of_source(source, entry.inputs, entry.outputs,
                                          converter=converter, atol=_catalog_atol(entry, folder))
    result = convert.import_model(config, os.path.join(folder, variant))
    return {"dir": result.serving_dir, "blessed": result.blessed, "flags": "",
            "max_abs_error": result.report.get("max_abs_error"),
            "summary": result.report.get("summary"),
            "converter": result.report["converter"],
            "seconds": round(time.perf_counter() - start, 1)}


def _catalog_atol(entry, folder: str) -> float:
    """The catalogs' tolerance (catalog_run.py): 1e-4 x max(1, the largest |output|
    onnxruntime gives on the benchmark's feeds). The importer's default is 1e-4
    absolute; these models' weights are drawn (``trained_like``), and ResNet-50's
    logits reach about 240, where float32 rounding alone passes 1e-4."""
    import onnxruntime as ort

    from tfx_bridge.artifacts import compare, tensorspec

    session = ort.InferenceSession(os.path.join(folder, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    feeds = tensorspec.make_inputs(tensorspec.parse_input_specs(entry.inputs), 2)
    outputs = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})
    scales = [s for s in map(compare.scale, outputs) if s is not None]
    return 1e-4 * max(1.0, max(scales, default=0.0))


def prepared(name: str, variant: str, cache: str, timeout: int) -> dict:
    """``prepare`` in a child process, or its cached record."""
    record = os.path.join(cache, name, f"{variant}.json")
    if os.path.exists(record):
        return json.load(open(record))
    shutil.rmtree(os.path.join(cache, name, variant), ignore_errors=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--prepare", name, variant,
           "--cache", cache]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout}s"}
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARKER)),
                None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:200]}"}
    out = json.loads(line[len(MARKER):])
    with open(record, "w") as f:
        json.dump(out, f)
    return out


# --------------------------------------------------------------------------- workers


class Worker:
    """A backend's process: requests in on stdin, one reply line each."""

    def __init__(self, label: str, kind: str, model: str, name: str, feeds: str,
                 flags: str = "", allocator: str = cpu_allocator.BFC):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        if kind == "tf":
            # TF Serving's process as the pusher's manifest starts it (oneDNN off, its
            # CPU allocator), or with ``allocator`` instead; never one inherited from
            # this shell, so the malloc row is TF's default allocator.
            env.update(child.SERVING_CPU_ENV)
            for name in cpu_allocator.VARIABLES:
                env.pop(name, None)
            env.update(cpu_allocator.allocator_env(allocator))
        self.label = label
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(BENCH_DIR, "serving_latency_worker.py"),
             "--kind", kind, "--model", model, "--name", name, "--feeds", feeds,
             "--flags", flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env=env)
        self.paths = self._reply()["paths"]

    def _reply(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(MARKER):
                return json.loads(line[len(MARKER):])
        raise RuntimeError(f"{self.label}: worker ended (exit {self.proc.wait()})")

    def ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if "error" in reply:
            raise RuntimeError(f"{self.label}: {reply['error']}")
        return reply

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _max_abs(ref_file: str, got_file: str) -> float:
    with np.load(ref_file) as ref, np.load(got_file) as got:
        return max(float(np.max(np.abs(ref[k].astype(np.float64) - got[k].astype(np.float64))))
                   for k in ref.files if k in got.files)


def time_model(name: str, workers: list, work: str, rounds: int, profile_calls: int) -> dict:
    """Outputs checked against onnxruntime, then interleaved rounds per batch."""
    out: dict = {"p50_ms": {}, "spread_ms": {}, "calls": {}, "max_abs_vs_ort": {}}
    for b in serving_models.MODELS[name].batches:
        ref = os.path.join(work, f"ort_{b}.npz")
        workers[0].ask(op="outputs", batch=b, out=ref)
        for w in workers[1:]:
            got = os.path.join(work, f"{w.label}_{b}.npz")
            w.ask(op="outputs", batch=b, out=got)
            out["max_abs_vs_ort"].setdefault(w.label, {})[str(b)] = _max_abs(ref, got)
        timed = [(w, p) for w in workers for p in w.paths]
        calls = {}
        for w, p in timed:  # warm-up, and calls per round from the warm call's time
            ms = min(w.ask(op="round", batch=b, calls=2, path=p)["ms"])
            calls[(w.label, p)] = int(min(MAX_CALLS, max(MIN_CALLS, ROUND_S * 1e3 / ms)))
        samples: dict = {key: [] for key in calls}
        medians: dict = {key: [] for key in calls}
        for r in range(rounds):
            for w, p in timed[r % len(timed):] + timed[:r % len(timed)]:
                ms = w.ask(op="round", batch=b, calls=calls[(w.label, p)], path=p)["ms"]
                samples[(w.label, p)] += ms
                medians[(w.label, p)].append(float(np.median(ms)))
        for (label, p), ms in samples.items():
            key = label if p == "python" else f"{label}/{p}"
            out["p50_ms"].setdefault(key, {})[str(b)] = round(float(np.median(ms)), 4)
            out["spread_ms"].setdefault(key, {})[str(b)] = [round(min(medians[(label, p)]), 4),
                                                           round(max(medians[(label, p)]), 4)]
            out["calls"].setdefault(key, {})[str(b)] = len(ms)
        log(f"{name} b{b}: " + " ".join(f"{k}={v[str(b)]:.3f}" for k, v in out["p50_ms"].items()))
    ours = next((w for w in workers if w.label == "ours" and "session" in w.paths), None)
    if ours is not None and profile_calls:
        b = serving_models.MODELS[name].batches[-1]
        out["profile_ours"] = dict(ours.ask(op="profile", batch=b, calls=profile_calls), batch=b)
    return out


def run_model(name: str, args) -> dict:
    from tfx_bridge.artifacts import tensorspec

    entry = serving_models.MODELS[name]
    start = time.perf_counter()
    row: dict = {"model": name, "about": entry.about, "batches": list(entry.batches),
                 "prepare": {}}
    try:
        onnx_path = export(name, args.cache)
    except Exception as e:  # noqa: BLE001 (a model torch cannot export: a recorded row)
        row["errors"] = {"export": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        row["seconds"] = round(time.perf_counter() - start, 1)
        return row
    # onnx2tf makes no detection signature (images in, padded detections out).
    variants = [v for v in TF_VARIANTS if v not in args.skip
                and not (entry.task == "detection" and v == "onnx2tf")]
    for variant in variants:
        if variant == "optimized" and "dir" not in row["prepare"].get("ours", {}):
            continue
        row["prepare"][variant] = prepared(name, variant, args.cache, args.timeout)
        log(f"{name}: {variant} {row['prepare'][variant]}")
    work = os.path.join(args.cache, name, "run")
    os.makedirs(work, exist_ok=True)
    specs = tensorspec.parse_input_specs(entry.inputs)
    for b in entry.batches:
        np.savez(os.path.join(work, f"feeds_{b}.npz"), **tensorspec.make_inputs(specs, b))
    folder = os.path.dirname(onnx_path)
    plan = [("ort", "ort", onnx_path, ""), ("torch", "torch", os.path.join(folder, "state.pt"), "")]
    plan += [(v, "tf", row["prepare"][v]["dir"], row["prepare"][v].get("flags", ""))
             for v in variants if "dir" in row["prepare"].get(v, {})]
    plan += [(label, "tf", path, "") for label, model, path in args.extras if model == name]
    if "dir" in row["prepare"].get("ours", {}):
        # The same SavedModel under TF's default allocator: what the allocator buys.
        plan.append((MALLOC_LABEL, "tf", row["prepare"]["ours"]["dir"],
                     row["prepare"]["ours"].get("flags", "")))
    plan = [p for p in plan if p[0] not in args.skip]
    workers = []
    try:
        for label, kind, path, flags in plan:
            allocator = cpu_allocator.MALLOC if label == MALLOC_LABEL else cpu_allocator.BFC
            try:
                workers.append(Worker(label, kind, path, name, work, flags, allocator))
            except RuntimeError as e:
                row.setdefault("errors", {})[label] = str(e)
        row.update(time_model(name, workers, work, args.rounds, args.profile_calls))
    except RuntimeError as e:
        row.setdefault("errors", {})["timing"] = str(e)
    finally:
        for w in workers:
            w.close()
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=None,
                        help=f"a subset of: {' '.join(serving_models.MODELS)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="2 rounds, no TrtOptimizer, no profile (for trying it out)")
    parser.add_argument("--skip", nargs="*", default=[],
                        help="backends left out: torch, onnx2tf, optimized, ...")
    parser.add_argument("--profile-calls", type=int, default=3)
    parser.add_argument("--extra", nargs="*", default=[], metavar="LABEL=NAME:SAVEDMODEL")
    parser.add_argument("--cache", default=DEFAULT_CACHE)
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--timeout", type=int, default=3600,
                        help="seconds per import or TrtOptimizer run")
    parser.add_argument("--prepare", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare:
        print(MARKER + json.dumps(prepare(*args.prepare, args.cache)), flush=True)
        return
    if args.quick:
        args.rounds, args.profile_calls = 2, 0
        args.skip = list(args.skip) + ["optimized"]
    args.extras = []
    for text in args.extra:
        label, _, rest = text.partition("=")
        model, _, path = rest.partition(":")
        args.extras.append((label, model, path))
    names = args.models or list(serving_models.MODELS)
    unknown = [n for n in names if n not in serving_models.MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(serving_models.MODELS)}")
    results = json.load(open(args.results)) if os.path.exists(args.results) else {}
    for name in names:
        log(f"{name}: start")
        row = run_model(name, args)
        row["load"] = os.getloadavg()
        row["rounds"] = args.rounds
        results[name] = row
        os.makedirs(os.path.dirname(args.results), exist_ok=True)
        with open(args.results, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
        log(f"{name}: done in {row['seconds']}s")
    md = os.path.splitext(args.results)[0] + ".md"
    with open(md, "w") as f:
        f.write(report.markdown(results))
    log(f"wrote {args.results} and {md}")


if __name__ == "__main__":
    main()
