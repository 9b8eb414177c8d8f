"""ONNX GridSample (bilinear, nearest and bicubic samples at given positions, on the
channel-last tensor) and Col2Im (refused by name), see onnx_tf/core.py for the
handler contract."""
from __future__ import annotations

import itertools
from typing import Optional

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.spatial import float_input, spatial, to_first, to_last
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- GridSample


def _check_grid_sample(info: NodeInfo) -> Optional[str]:
    mode = info.attrs.get("mode") or ("linear" if info.opset >= 20 else "bilinear")
    if mode not in ("bilinear", "linear", "nearest", "bicubic", "cubic"):
        return f"mode={mode!r} is not supported"
    if info.attrs.get("padding_mode") not in ("zeros", "border", "reflection"):
        return f"padding_mode={info.attrs['padding_mode']!r} is not supported"
    return None


def _reflect(v, lo: float, hi: float):
    tf = _tf()
    rng = hi - lo
    if rng <= 0:
        return tf.zeros_like(v) + lo
    below = lo - v
    n = tf.floor(below / rng)
    r = below - n * rng
    even = tf.equal(tf.math.floormod(n, 2), 0)
    v_lo = tf.where(even, lo + r, hi - r)
    above = v - hi
    n2 = tf.floor(above / rng)
    r2 = above - n2 * rng
    even2 = tf.equal(tf.math.floormod(n2, 2), 0)
    v_hi = tf.where(even2, hi - r2, lo + r2)
    return tf.where(v < lo, v_lo, tf.where(v > hi, v_hi, v))


@op("GridSample", attrs={"align_corners": 0, "mode": None, "padding_mode": "zeros"},
    check=_check_grid_sample, since=16)
def grid_sample(node):
    tf = _tf()
    dtype = float_input(node)
    mode = node.attr("mode") or ("linear" if node.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = node.attr("padding_mode")
    align = bool(node.attr("align_corners"))
    rank = node.rank(0)
    nd = rank - 2
    if node.opset < 20 and nd != 2:
        node.refuse(f"GridSample-16 takes 4-D inputs, got rank {rank}")
    dims = spatial(node, 0, "GridSample input spatial dimensions")
    x = node.t(0)
    compute = tf.float64 if dtype == tf.float64 else tf.float32
    grid = tf.cast(node.t(1), compute)
    # Values as [N, D1..Dr, C] so gather_nd over the spatial index picks channel vectors.
    xl = tf.cast(to_last(x, rank), compute)
    coords = []
    for a in range(nd):
        n = grid[..., nd - 1 - a]  # the grid's last axis lists x (width) first
        size = dims[a]
        c = (n + 1) / 2 * (size - 1) if align else ((n + 1) * size - 1) / 2
        coords.append(c)
    lo = [0.0 if align else -0.5 for _ in dims]
    hi = [d - 1.0 if align else d - 0.5 for d in dims]
    if mode == "nearest":
        coords = [tf.round(c) for c in coords]  # half to even, as PyTorch
    for a in range(nd):
        c = coords[a]
        outside = tf.logical_or(c < lo[a], c > hi[a])
        if padding == "border" and mode != "cubic":
            # Cubic + border clamps each tap, not the coordinate (PyTorch and onnxruntime;
            # ONNX's reference clamps both, which no node test covers).
            coords[a] = tf.where(outside, tf.clip_by_value(c, 0.0, dims[a] - 1.0), c)
        elif padding == "reflection":
            coords[a] = tf.where(outside, _reflect(c, lo[a], hi[a]), c)
    if mode == "nearest":
        taps = [[(tf.cast(c, tf.int64), tf.ones_like(c))] for c in coords]
    else:
        taps = []
        for c in coords:
            base = tf.floor(c)
            t = c - base
            b = tf.cast(base, tf.int64)
            if mode == "linear":
                taps.append([(b, 1 - t), (b + 1, t)])
            else:
                a_ = -0.75
                t1, t2 = t + 1, 2 - t
                w = [((a_ * t1 - 5 * a_) * t1 + 8 * a_) * t1 - 4 * a_,
                     ((a_ + 2) * t - (a_ + 3)) * t * t + 1,
                     ((a_ + 2) * (1 - t) - (a_ + 3)) * (1 - t) * (1 - t) + 1,
                     ((a_ * t2 - 5 * a_) * t2 + 8 * a_) * t2 - 4 * a_]
                taps.append([(b + o, wi) for o, wi in zip((-1, 0, 1, 2), w, strict=True)])
    y = None
    for combo in itertools.product(*taps):
        weight = None
        valid = None
        idxs = []
        for a, (i, w) in enumerate(combo):
            weight = w if weight is None else weight * w
            if padding == "zeros":
                ok = tf.logical_and(i >= 0, i < dims[a])
                valid = ok if valid is None else tf.logical_and(valid, ok)
            elif padding == "reflection":
                i = tf.cast(_reflect(tf.cast(i, compute), lo[a], hi[a]), tf.int64)
            idxs.append(tf.clip_by_value(i, 0, dims[a] - 1))
        if valid is not None:
            weight = tf.where(valid, weight, tf.zeros_like(weight))
        vals = tf.gather_nd(xl, tf.stack(idxs, -1), batch_dims=1)
        part = vals * weight[..., None]
        y = part if y is None else y + part
    return tf.cast(to_first(y, rank), dtype)


# --------------------------------------------------------------------------- refused


@op("Col2Im", attrs={"dilations": None, "pads": None, "strides": None},
    check=lambda info: "Col2Im is not implemented")
def col2im(node):
    node.refuse("Col2Im is not implemented", "replace nn.Fold with standard tensor ops")
