"""torchvision's detectors through the converter: the ONNX graph torchvision documents
(``torch.onnx.export(model, ([image],), ...)``, one ``[3, H, W]`` image in; boxes,
labels, scores, and masks or keypoints out, counts dynamic), converted by our
converter alone (``tfx_bridge.onnx_tf``) and run with oneDNN off against
onnxruntime on the same file, on images of two sizes and different content.

Models are catalog_detection.py's (``weights=None``, small sizes, score threshold
0, BatchNorm statistics calibrated on random images).

Per model: whether it exported and converted, the detection count and labels
(exact), the largest box and score differences, and whether equal scores (within
float rounding) let the order differ, said as such rather than passed. One JSON
line per model in benchmarks/results/detection_graphs.jsonl.

    nice -n 15 .venv/bin/python benchmarks/detection_graphs.py [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import catalog_detection  # noqa: E402
from catalog_detection import DETECTORS  # noqa: E402

OUT = os.path.join(BENCH_DIR, "results", "detection_graphs.jsonl")
IMAGES = ((1, 120, 150), (2, 97, 131))  # (seed, height, width)
TIMEOUT_S = 1200
# Scores this close may come out of two float32 computations in either order.
TIE_ATOL = 1e-4


def build(name: str):
    return catalog_detection.build(name).module


def child(name: str, folder: str) -> dict:
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    row = {"model": name}
    t = time.time()
    model = build(name)
    row["params"] = sum(p.numel() for p in model.parameters())
    image = torch.rand(3, *IMAGES[0][1:], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        outputs = list(model([image])[0].keys())
    path = os.path.join(folder, f"{name}.onnx")
    try:
        torch.onnx.export(model, ([image],), path, opset_version=17, input_names=["image"],
                          output_names=outputs, dynamo=False,
                          dynamic_axes={"image": {1: "height", 2: "width"},
                                        **{k: {0: "count"} for k in outputs}})
    except Exception as e:  # noqa: BLE001 (torch's own export: recorded)
        return {**row, "status": "export_failed", "message": f"{type(e).__name__}: {e}"[:400]}
    row["export_s"] = round(time.time() - t, 1)
    graph = onnx.load(path)
    row["ops"] = sorted(_op_types(graph.graph))
    from tfx_bridge.onnx_tf import core

    t = time.time()
    try:
        converted = core.convert(graph)
    except Exception as e:  # noqa: BLE001 (a refusal names op and node: recorded)
        return {**row, "status": "refused", "message": f"{type(e).__name__}: {e}"[:600]}
    row["convert_s"] = round(time.time() - t, 1)
    import tensorflow as tf

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    checks = []
    for seed, h, w in IMAGES:
        img = np.random.default_rng(seed).random((3, h, w), dtype=np.float32)
        want = dict(zip(outputs, session.run(None, {"image": img}), strict=True))
        served = converted.serve(tf.constant(img))
        got = {k: served[k].numpy() for k in outputs}
        checks.append(compare(want, got, f"{h}x{w}"))
    row["checks"] = checks
    row["status"] = ("verified" if all(c["verdict"] == "equal" for c in checks) else
                     "ties" if all(c["verdict"] in ("equal", "tie-order") for c in checks)
                     else "not_equivalent")
    return row


def compare(want: dict, got: dict, image: str, atol: float = 1e-3) -> dict:
    """Counts and labels exact; boxes, scores (masks at torchvision's 0.5 threshold,
    keypoints) within tolerance, in the reference's order. A difference confined to
    detections whose scores tie within float rounding is a tie-order verdict."""
    import numpy as np

    check = {"image": image, "count": int(len(want["scores"]))}
    if len(got["scores"]) != len(want["scores"]):
        return {**check, "verdict": "count", "got_count": int(len(got["scores"]))}
    scores = want["scores"]
    # Tie groups: consecutive detections whose scores differ by less than two float32
    # computations of them can (TIE_ATOL): either order is a faithful result.
    group = np.concatenate([[0], np.cumsum(np.diff(scores) < -TIE_ATOL)]) if len(scores) \
        else np.zeros(0, int)
    off = np.zeros(len(scores), bool)
    errors = {}
    for key, w in want.items():
        g = got[key]
        if key == "masks":
            w, g = w > 0.5, g > 0.5
        if w.shape != g.shape:
            return {**check, "verdict": "shape", "output": key}
        if w.dtype.kind in "iub":
            bad = (w != g).reshape(len(w), -1).any(1) if len(w) else np.zeros(0, bool)
            frac = float(bad.mean()) if len(w) else 0.0
            if key == "masks":  # pixels at the threshold's edge may flip
                frac = float((w != g).mean()) if w.size else 0.0
                bad = (w != g).reshape(len(w), -1).mean(1) > 1e-3
            errors[key] = frac
        else:
            scale = max(1.0, float(np.abs(w).max())) if w.size else 1.0
            diff = np.abs(w.astype(np.float64) - g).reshape(len(w), -1).max(1) if len(w) \
                else np.zeros(0)
            errors[key] = float(diff.max()) if diff.size else 0.0
            bad = diff > atol * scale
        off |= bad
    check["errors"] = errors
    if not off.any():
        return {**check, "verdict": "equal"}
    if _same_within_ties(want, got, group, off, atol):
        return {**check, "verdict": "tie-order", "tied_rows": int(off.sum())}
    return {**check, "verdict": "differs", "rows_off": int(off.sum())}


def _op_types(graph) -> set:
    """Op types of a graph and of every subgraph (If branches, Loop bodies)."""
    types = set()
    for node in graph.node:
        types.add(node.op_type)
        for attr in node.attribute:
            for sub in list(attr.g.node and [attr.g]) + list(attr.graphs):
                types |= _op_types(sub)
    return types


def _same_within_ties(want: dict, got: dict, group, off, atol: float) -> bool:
    """Whether every detection out of place has its match (label, box, score) among
    the reference's detections of its own tie group."""
    import numpy as np

    scale = max(1.0, float(np.abs(want["boxes"]).max())) if len(want["boxes"]) else 1.0
    for i in np.flatnonzero(off):
        peers = np.flatnonzero(group == group[i])
        if len(peers) < 2:
            return False
        match = ((want["labels"][peers] == got["labels"][i])
                 & (np.abs(want["boxes"][peers] - got["boxes"][i]).max(1) <= atol * scale)
                 & (np.abs(want["scores"][peers] - got["scores"][i]) <= TIE_ATOL))
        if not match.any():
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as folder:
            print("ROW " + json.dumps(child(args.child, folder)), flush=True)
        return
    for name in DETECTORS:
        if args.only and name not in args.only:
            continue
        t = time.time()
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", name],
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
            rows = [ln[4:] for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
            row = json.loads(rows[-1]) if rows else {
                "model": name, "status": "crash",
                "message": (proc.stderr.strip().splitlines() or ["no output"])[-1][:400]}
        except subprocess.TimeoutExpired:
            row = {"model": name, "status": "timeout", "message": f"over {TIMEOUT_S} s"}
        row["wall_s"] = round(time.time() - t, 1)
        with open(OUT, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{name}: {row['status']} ({row['wall_s']} s) {row.get('message', '')[:200]}",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
