"""ONNX ops that broadcast, tile, pad or fill (see onnx_tf/core.py for the handler contract):
Expand, Tile, Pad, ConstantOfShape, Range.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.shape import runtime_axes
from tfx_bridge.onnx_tf.ops.shape_util import known_values
from tfx_bridge.onnx_tf.ops.tensor_util import FIX_CONST, Dim, _axis, _dims, _scalar, i64, vec
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- broadcast/pad


@op("Expand", since=8)
def expand(node):
    tf = _tf()
    target = node.maybe_const(1)
    dims = _dims(node, 0)
    if target is not None and all(isinstance(d, int) for d in dims):
        out = np.broadcast_shapes(tuple(dims), tuple(int(v) for v in target.reshape(-1)))
        return tf.broadcast_to(node.t(0), np.array(out, np.int64))
    known = known_values(node.value(1))
    target = tf.cast(node.t(1), tf.int64)
    out = tf.broadcast_dynamic_shape(tf.convert_to_tensor(vec(dims)), target)
    result = tf.broadcast_to(node.t(0), out)
    if known is not None:
        # The static dims the target's known entries give (Shape(other) of a tensor
        # with a dynamic batch), for the consumers' handlers; a target that does not
        # broadcast (or a negative entry) is left to fail when the graph runs.
        try:
            result.set_shape(tf.broadcast_static_shape(tf.TensorShape(node.shape(0)),
                                                       tf.TensorShape(known)))
        except ValueError:
            pass
    return result


@op("Tile", since=6)
def tile(node):
    tf = _tf()
    x = node.t(0)
    if x.dtype == tf.uint16:  # no CPU Tile kernel: tile the same bits as int16
        return tf.bitcast(tf.tile(tf.bitcast(x, tf.int16), i64(node.value(1))), tf.uint16)
    return tf.tile(x, i64(node.value(1)))


PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_index(mode: str, dim: Dim, begin: int, end: int):
    """Source indices along one axis for edge/reflect/wrap padding (negative pads crop)."""
    tf = _tf()
    idx = tf.range(-begin, tf.cast(dim, tf.int64) + end, dtype=tf.int64)
    if mode == "edge":
        return tf.clip_by_value(idx, 0, tf.cast(dim, tf.int64) - 1)
    if mode == "wrap":
        return tf.math.floormod(idx, tf.cast(dim, tf.int64))
    period = tf.maximum(2 * (tf.cast(dim, tf.int64) - 1), 1)  # reflect, without the edge
    m = tf.math.floormod(idx, period)
    return tf.where(m >= dim, period - m, m)


@op("Pad", attrs={"mode": "constant", "pads": None, "value": 0.0}, since=2,
    check=lambda info: None if info.attrs.get("mode", "constant") in PAD_MODES else
    f"mode={info.attrs.get('mode')!r} is not supported (one of {', '.join(PAD_MODES)})")
def pad(node):
    tf = _tf()
    dims = _dims(node, 0)
    rank = len(dims)
    mode = node.attr("mode")
    x = node.t(0)
    if node.opset < 11:
        if node.attr("pads") is None:
            node.refuse("Pad without pads")
        pads = np.array(node.attr("pads"), np.int64)
        value = np.array(node.attr("value"), x.dtype.as_numpy_dtype)
        axes: Any = list(range(rank))
    else:
        pads = node.maybe_const(1)
        value = node.value(2) if node.has(2) else np.zeros((), x.dtype.as_numpy_dtype)
        axes = node.maybe_const(3) if node.has(3) else np.arange(rank)
        if axes is None:
            axes, _ = runtime_axes(node, tf.reshape(tf.cast(node.t(3), tf.int64), [-1]),
                                    rank)
        else:
            axes = [_axis(node, a, rank) for a in axes.reshape(-1)]
    if pads is not None and isinstance(axes, list):
        pads = [int(p) for p in pads.reshape(-1)]
        if len(pads) != 2 * len(axes):
            node.refuse(f"{len(pads)} pads for {len(axes)} axes")
        widths: Any = [(0, 0)] * rank
        for j, a in enumerate(axes):
            widths[a] = (pads[j], pads[len(axes) + j])
    else:  # run-time pads or axes: a [rank, 2] tensor of (begin, end)
        count = len(axes) if isinstance(axes, list) else axes.shape[0]
        if count is None:
            node.refuse("run-time axes of unknown length", FIX_CONST)
        pairs = tf.transpose(tf.reshape(tf.cast(node.t(1), tf.int64), [2, count]))
        where = tf.reshape(tf.constant(axes, tf.int64) if isinstance(axes, list) else axes,
                           [count, 1])
        full = tf.scatter_nd(where, pairs, tf.constant([rank, 2], tf.int64))
        widths = [(full[a, 0], full[a, 1]) for a in range(rank)]
    if mode == "constant":
        if any(not isinstance(w, int) or w < 0 for pair in widths for w in pair):
            # Negative pads crop: slice first, then pad by the positive parts.
            begin = [tf.maximum(-b, 0) if not isinstance(b, int) else max(-b, 0)
                     for b, _ in widths]
            end = [d - (tf.maximum(-e, 0) if not isinstance(e, int) else max(-e, 0))
                   for d, (_, e) in zip(dims, widths, strict=True)]
            x = tf.strided_slice(x, vec(begin), vec(end))
        positive = vec([(tf.maximum(w, 0) if not isinstance(w, int) else max(w, 0))
                         for pair in widths for w in pair])
        return tf.pad(x, tf.reshape(positive, [rank, 2]),
                      constant_values=tf.cast(_scalar(value), x.dtype))
    for a, (b, e) in enumerate(widths):
        if not isinstance(b, int) or not isinstance(e, int) or b or e:
            x = tf.gather(x, _pad_index(mode, dims[a], b, e), axis=a)
    return x


@op("ConstantOfShape", attrs={"value": None}, since=9)
def constant_of_shape(node):
    from onnx import numpy_helper
    tf = _tf()
    proto = node.attr("value")
    value = np.zeros((), np.float32) if proto is None else \
        numpy_helper.to_array(proto).reshape(-1)[0]
    shape_ = node.maybe_const(0)
    if shape_ is not None and int(np.prod(shape_)) <= 1 << 16:
        return np.full(shape_.astype(np.int64), value, dtype=value.dtype)
    return tf.fill(tf.cast(node.t(0), tf.int64), tf.constant(value))


@op("Range", since=11)
def range_(node):
    tf = _tf()
    values = [node.maybe_const(i) for i in range(3)]
    if all(v is not None for v in values):
        start, limit, delta = (v.reshape(()) for v in values)
        return np.arange(start, limit, delta, dtype=start.dtype)
    start, limit, delta = (tf.reshape(node.t(i), []) for i in range(3))
    dtype = start.dtype
    f64 = [tf.cast(v, tf.float64) for v in (start, limit, delta)]
    # ONNX: max(ceil((limit - start) / delta), 0) elements (TF's range errors instead).
    count = tf.cast(tf.maximum(tf.math.ceil((f64[1] - f64[0]) / f64[2]), 0.0), tf.int64)
    if dtype.is_integer:
        steps = tf.range(count, dtype=tf.int64)
        return tf.cast(tf.cast(start, tf.int64) + steps * tf.cast(delta, tf.int64), dtype)
    return start + tf.cast(tf.range(count), dtype) * delta
