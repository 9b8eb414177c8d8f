"""ONNX reductions and the Softmax family (see onnx_tf/core.py for the handler contract).
"""
from __future__ import annotations

from typing import Callable, List, Optional

import numpy as np

from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.matmul import normalize_axis
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- reductions

# The opset at which ``axes`` moved from an attribute to an input.
_AXES_INPUT_SINCE = {"ReduceSum": 13}
_REDUCE_ATTRS = {"axes": None, "keepdims": 1, "noop_with_empty_axes": 0}


def _reduce_check(info) -> Optional[str]:
    if info.attrs.get("keepdims") not in (0, 1):
        return f"keepdims={info.attrs.get('keepdims')} (must be 0 or 1)"
    return None


def _reduce_axes(node):
    """The reduced axes: a sorted list, an int32 tensor (run-time axes), ("dynamic-noop",
    tensor) or "noop" (noop_with_empty_axes and no axes)."""
    tf = _tf()
    rank = node.rank(0)
    noop = bool(node.attr("noop_with_empty_axes"))
    axes = node.attr("axes")
    if axes is not None:
        axes = np.asarray(axes, np.int64).reshape(-1)
    elif node.has(1):
        axes = node.maybe_const(1)
        if axes is None:
            axes_t = tf.cast(tf.reshape(node.t(1), [-1]), tf.int32)
            length = axes_t.shape[0]
            if length is None:  # empty only known at run time
                everything = tf.range(rank, dtype=tf.int32)
                if noop:
                    return ("dynamic-noop", axes_t)
                return tf.cond(tf.size(axes_t) > 0, lambda: axes_t, lambda: everything)
            if length > 0:
                return axes_t
            axes = np.zeros([0], np.int64)
        axes = np.asarray(axes, np.int64).reshape(-1)
    else:
        axes = np.zeros([0], np.int64)
    if axes.size == 0:
        return "noop" if noop else list(range(rank))
    normalized = sorted(normalize_axis(node, int(a), rank, "axes value") for a in axes)
    if len(set(normalized)) != len(normalized):
        node.refuse(f"axes {axes.tolist()} repeat an axis")
    return normalized


def _reduce(node, fn: Callable, keep: bool, axes):
    """fn(x, axes, keepdims) for static or run-time axes."""
    tf = _tf()
    x = node.t(0)
    if isinstance(axes, tuple):  # ("dynamic-noop", axes tensor): identity when empty
        axes_t = axes[1]
        return tf.cond(tf.size(axes_t) > 0, lambda: fn(x, axes_t, keep), lambda: x)
    return fn(x, axes, keep)


def _float_compute(dtype, fn: Callable) -> Callable:
    """fn computed in float64 for integer inputs, cast back (ONNX's reference: numpy in
    float64, then astype, which truncates)."""
    tf = _tf()
    if dtype.is_floating:
        return fn

    def wrapped(x, axes, keep):
        return tf.cast(fn(tf.cast(x, tf.float64), axes, keep), dtype)
    return wrapped


def _reducer(kind: str, dtype) -> Callable:
    tf = _tf()
    if dtype == tf.bool:
        if kind == "ReduceMax":
            return tf.reduce_any
        if kind == "ReduceMin":
            return tf.reduce_all
        return None
    if kind == "ReduceSum":
        return tf.reduce_sum
    if kind == "ReduceMean":
        return tf.reduce_mean
    if kind == "ReduceMax":
        return tf.reduce_max
    if kind == "ReduceMin":
        return tf.reduce_min
    if kind == "ReduceProd":
        return tf.reduce_prod
    if kind == "ReduceSumSquare":
        return lambda x, axes, keep: tf.reduce_sum(x * x, axes, keep)
    if kind == "ReduceL1":
        if dtype.is_unsigned:
            return tf.reduce_sum
        return lambda x, axes, keep: tf.reduce_sum(tf.abs(x), axes, keep)
    if kind == "ReduceL2":
        return _float_compute(dtype, lambda x, axes, keep: tf.sqrt(
            tf.reduce_sum(x * x, axes, keep)))
    if kind == "ReduceLogSum":
        return _float_compute(dtype, lambda x, axes, keep: tf.math.log(
            tf.reduce_sum(x, axes, keep)))
    if kind == "ReduceLogSumExp":
        return _float_compute(dtype, tf.math.reduce_logsumexp)
    raise AssertionError(kind)


def _make_reduce(kind: str):
    def handler(node):
        tf = _tf()
        dtype = node.dtype(0)
        if dtype == tf.bool and kind not in ("ReduceMax", "ReduceMin"):
            node.refuse(f"{kind} of a bool tensor", "cast it to an integer type first")
        if kind == "ReduceLogSumExp" and not dtype.is_floating:
            # integer rounding of the max-shifted sum is unspecified (ONNX Runtime's
            # opset-13 and opset-18 kernels disagree)
            node.refuse(f"ReduceLogSumExp of an integer ({dtype.name}) tensor",
                        "cast it to float first")
        if node.attr("axes") is not None and node.opset >= _AXES_INPUT_SINCE.get(kind, 18):
            node.refuse(f"the axes attribute at opset {node.opset} (axes is an input since "
                        f"opset {_AXES_INPUT_SINCE.get(kind, 18)})")
        keep = bool(node.attr("keepdims"))
        axes = _reduce_axes(node)
        if isinstance(axes, str):  # "noop": noop_with_empty_axes and no axes
            return node.value(0)
        return _reduce(node, _reducer(kind, dtype), keep, axes)
    handler.__name__ = kind
    return handler


for _kind in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"):
    op(_kind, attrs=dict(_REDUCE_ATTRS), check=_reduce_check)(_make_reduce(_kind))


# --------------------------------------------------------------------------- Softmax family


def _softmax_axes(node) -> List[int]:
    """The axes normalized over: opset < 13 coerces to 2-D at ``axis`` (every axis from it
    on), opset >= 13 uses the single axis."""
    rank = node.rank(0)
    default = -1 if node.opset >= 13 else 1
    axis = node.attr("axis")
    axis = default if axis is None else int(axis)
    if rank == 0:
        node.refuse(f"{node.op_type} of a scalar", "give it a rank >= 1 input")
    axis = normalize_axis(node, axis, rank)
    return [axis] if node.opset >= 13 else list(range(axis, rank))


def _in_float32_if_half(fn: Callable, x):
    """fn(x); a float16 x computed in float32 and rounded once (as ONNX Runtime does)."""
    tf = _tf()
    if x.dtype == tf.float16:
        return tf.cast(fn(tf.cast(x, tf.float32)), tf.float16)
    return fn(x)


@op("Softmax", attrs={"axis": None})
def softmax(node):
    tf = _tf()
    axes = _softmax_axes(node)

    def fn(x):
        if len(axes) == 1:
            return tf.nn.softmax(x, axis=axes[0])
        e = tf.exp(x - tf.reduce_max(x, axes, keepdims=True))
        return e / tf.reduce_sum(e, axes, keepdims=True)
    return _in_float32_if_half(fn, node.t(0))


@op("LogSoftmax", attrs={"axis": None})
def log_softmax(node):
    tf = _tf()
    axes = _softmax_axes(node)

    def fn(x):
        if len(axes) == 1:
            return tf.nn.log_softmax(x, axis=axes[0])
        shifted = x - tf.reduce_max(x, axes, keepdims=True)
        return shifted - tf.math.log(tf.reduce_sum(tf.exp(shifted), axes, keepdims=True))
    return _in_float32_if_half(fn, node.t(0))


@op("Hardmax", attrs={"axis": None})
def hardmax(node):
    tf = _tf()
    axes = _softmax_axes(node)
    x = node.t(0)
    if len(axes) == 1:
        axis = axes[0]
        depth = tf.shape(x)[axis]
        return tf.one_hot(tf.argmax(x, axis), depth, axis=axis, dtype=x.dtype)
    # opset < 13: argmax over the flattened trailing axes
    shape = tf.shape(x)
    flat = tf.reshape(x, tf.concat([shape[:axes[0]], [-1]], 0))
    y = tf.one_hot(tf.argmax(flat, -1), tf.shape(flat)[-1], axis=-1, dtype=x.dtype)
    return tf.reshape(y, shape)
