"""One backend of the served-latency benchmark, loaded once in its own fresh process
and driven by serving_latency.py over stdin/stdout (one JSON object a line), so the
parent can interleave rounds across processes while only one of them runs at a time.

Backends: ``ort`` (onnxruntime, CPU EP, 2 intra-op threads), ``torch`` (eager,
``torch.set_num_threads(2)``, inference mode) and ``tf`` (a SavedModel's
serving_default through two paths: the Python signature call, and ``session``:
Session::Run of the signature's tensors in a TF1 graph, TF Serving's path). The
parent starts ``tf`` workers with ``TF_ENABLE_ONEDNN_OPTS=0``: stock TF Serving CPU
builds run TF's Eigen kernels.

Requests: ``{"op": "outputs", "batch": b, "out": FILE}`` writes the outputs for the
batch's feeds (npz), ``{"op": "round", "batch": b, "calls": n, "path": P}`` times n
calls (milliseconds each), ``{"op": "profile", "batch": b, "calls": n}`` runs the
session path with a full trace and sums step-stats time per op type.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

import numpy as np

MARKER = "WORKER "


def _detections(dicts, k: int) -> dict:
    """torchvision's per-image dicts as the served signature's counts, scores and
    classes (padded to ``k``), the outputs compared across backends."""
    scores = np.zeros((len(dicts), k), np.float32)
    classes = np.zeros((len(dicts), k), np.float32)
    for i, d in enumerate(dicts):
        n = min(len(d["scores"]), k)
        scores[i, :n] = np.asarray(d["scores"])[:n]
        classes[i, :n] = np.asarray(d["labels"])[:n]
    return {"num_detections": np.array([min(len(d["scores"]), k) for d in dicts], np.float32),
            "detection_scores": scores, "detection_classes": classes}


def _images(feeds) -> list:
    """A detector's uint8 [B, H, W, 3] batch as torchvision's [3, H, W] floats in [0, 1]."""
    return [np.ascontiguousarray(im.transpose(2, 0, 1)).astype(np.float32) / np.float32(255)
            for im in feeds["images"]]


class OrtBackend:
    # "nospin": the same session options with the thread pool's spin-wait off, which
    # matters on a shared host where a spinning thread competes with the others.
    paths = ("python", "nospin")

    def __init__(self, args):
        import onnxruntime as ort

        self.sessions = {}
        for path in self.paths:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 2
            options.inter_op_num_threads = 1
            if path == "nospin":
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self.sessions[path] = ort.InferenceSession(args.model, options,
                                                       providers=["CPUExecutionProvider"])
        self.session = self.sessions["python"]
        self.names = [o.name for o in self.session.get_outputs()]
        # A detector's ONNX takes one image: a batch is its images one after another.
        self.detections = _detections_per_image(args.name)

    def caller(self, feeds, path):
        session = self.sessions[path]
        if self.detections:
            images = _images(feeds)
            name = session.get_inputs()[0].name
            return lambda: [session.run(None, {name: im}) for im in images]
        return lambda: session.run(None, feeds)

    def outputs(self, feeds):
        if self.detections:
            found = [dict(zip(self.names, out, strict=True))
                     for out in self.caller(feeds, "python")()]
            return _detections(found, self.detections)
        return dict(zip(self.names, self.session.run(None, feeds), strict=True))


class TorchBackend:
    paths = ("python",)

    def __init__(self, args):
        import serving_models
        import torch

        torch.set_num_threads(2)
        self.torch = torch
        self.model = serving_models.build(args.name)
        self.model.load_state_dict(torch.load(args.model, weights_only=True))
        self.inputs = [s.split(":")[0] for s in serving_models.MODELS[args.name].inputs]
        self.names = serving_models.MODELS[args.name].outputs
        self.detections = _detections_per_image(args.name)

    def caller(self, feeds, path):
        if self.detections:  # torchvision's form: one list of [3, H, W] images
            args = [[self.torch.from_numpy(im) for im in _images(feeds)]]
        else:
            args = [self.torch.from_numpy(feeds[n]) for n in self.inputs]

        def call():
            with self.torch.inference_mode():
                return self.model(*args)
        return call

    def outputs(self, feeds):
        out = self.caller(feeds, "python")()
        if self.detections:
            return _detections([{k: v.numpy() for k, v in d.items()} for d in out],
                               self.detections)
        out = out if isinstance(out, (tuple, list)) else [out]
        return {n: o.numpy() for n, o in zip(self.names, out, strict=True)}


class TfBackend:
    paths = ("python", "session")

    def __init__(self, args):
        import tensorflow as tf

        from tfx_bridge import serving_threads
        from tfx_bridge.components.trt_optimizer import measure

        flags = args.flags.split() if args.flags else []
        self.tf = tf
        self.servable = measure.load_servable(args.model, flags)
        self.session = None
        if not any("tflite" in f for f in flags):
            # TF Serving's session threads where the flags give them (the optimizer's
            # measured inter-op choice); TF's defaults (the host's cores) otherwise.
            threads = {f.split("=")[0].lstrip("-"): int(f.split("=")[1]) for f in flags
                       if f.split("=")[0].lstrip("-") in serving_threads.SESSION_FLAGS}
            config = tf.compat.v1.ConfigProto(
                intra_op_parallelism_threads=threads.get(serving_threads.SESSION_FLAGS[0], 0),
                inter_op_parallelism_threads=threads.get(serving_threads.SESSION_FLAGS[1], 0))
            self.graph = tf.Graph()
            with self.graph.as_default():
                self.session = tf.compat.v1.Session(graph=self.graph, config=config)
                meta = tf.compat.v1.saved_model.loader.load(self.session, ["serve"],
                                                            args.model)
            sig = meta.signature_def["serving_default"]
            self.fetch = {k: sig.outputs[k].name for k in sorted(sig.outputs)}
            self.feed_names = {k: v.name for k, v in sig.inputs.items()}
            self.paths = ("python", "session")
        else:
            self.paths = ("python",)

    def caller(self, feeds, path):
        if path == "session":
            feed = {self.feed_names[k]: v for k, v in feeds.items()}
            fetch = list(self.fetch.values())
            return lambda: self.session.run(fetch, feed)
        prepared = self.servable.prepare(feeds)
        return lambda: self.servable.call(**prepared)

    def outputs(self, feeds):
        return self.servable.outputs(feeds)

    def profile(self, feeds, calls: int) -> dict:
        """Time per op type over ``calls`` traced Session runs (after one warm-up)."""
        tf = self.tf
        feed = {self.feed_names[k]: v for k, v in feeds.items()}
        fetch = list(self.fetch.values())
        self.session.run(fetch, feed)
        by_type: dict = collections.Counter()
        nodes: dict = collections.Counter()
        wall = []
        for _ in range(calls):
            options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
            meta = tf.compat.v1.RunMetadata()
            start = time.perf_counter()
            self.session.run(fetch, feed, options=options, run_metadata=meta)
            wall.append((time.perf_counter() - start) * 1e3)
            for dev in meta.step_stats.dev_stats:
                for n in dev.node_stats:
                    op = n.timeline_label.split("(")[0].split(" = ")[-1].strip() or n.node_name
                    micros = n.op_end_rel_micros - n.op_start_rel_micros
                    by_type[op] += micros
                    nodes[n.node_name] += 1
        total = sum(by_type.values())
        return {"calls": calls, "traced_wall_ms": float(np.median(wall)),
                "op_ms_sum": total / calls / 1e3, "nodes_run": len(nodes),
                "top": [[op, round(us / calls / 1e3, 3), round(us / total, 3)]
                        for op, us in by_type.most_common(12)]}


def _detections_per_image(name: str) -> int:
    """K for a detector of serving_models.py (its outputs are compared padded to K),
    0 for other models."""
    import serving_models

    entry = serving_models.MODELS[name]
    return entry.detections if entry.task == "detection" else 0


BACKENDS = {"ort": OrtBackend, "torch": TorchBackend, "tf": TfBackend}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=sorted(BACKENDS), required=True)
    parser.add_argument("--model", required=True, help="ONNX file, state_dict or SavedModel")
    parser.add_argument("--name", required=True, help="serving_models name")
    parser.add_argument("--feeds", required=True, help="folder of feeds_<batch>.npz")
    parser.add_argument("--flags", default="", help="TF Serving flags (optimizer output)")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    backend = BACKENDS[args.kind](args)
    feeds = {}

    def feeds_of(batch):
        if batch not in feeds:
            with np.load(os.path.join(args.feeds, f"feeds_{batch}.npz")) as z:
                feeds[batch] = {k: z[k] for k in z.files}
        return feeds[batch]

    print(MARKER + json.dumps({"ready": True, "paths": list(backend.paths)}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "outputs":
                np.savez(req["out"], **backend.outputs(feeds_of(req["batch"])))
                reply = {"ok": True}
            elif req["op"] == "round":
                call = backend.caller(feeds_of(req["batch"]), req["path"])
                times = []
                for _ in range(req["calls"]):
                    start = time.perf_counter()
                    call()
                    times.append((time.perf_counter() - start) * 1e3)
                reply = {"ms": times}
            elif req["op"] == "profile":
                reply = backend.profile(feeds_of(req["batch"]), req["calls"])
            else:
                reply = {"error": f"unknown op {req['op']}"}
        except Exception as e:  # noqa: BLE001  (reported to the parent, which records it)
            reply = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        print(MARKER + json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
