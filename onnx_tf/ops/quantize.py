"""ONNX (de)quantize ops (see onnx_tf/core.py for the handler contract).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf import dtypes
from tfx_bridge.onnx_tf.core import is_const
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.control import _tensor
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- quantize

_QUANT_RANGES = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767)}
_QUANT_ELEMS = {"uint8": 2, "int8": 3, "uint16": 4, "int16": 5}
_QUANT_NAMES = "int8/uint8/int16/uint16"


def _broadcast_param(node, value, x, axis: int, block_size: int):
    """A scale/zero point shaped to broadcast against ``x`` (ONNX's reshape_input): scalar,
    per-axis (1-D along ``axis``) or blocked (repeated ``block_size`` times along ``axis``)."""
    tf = _tf()
    rank = x.shape.rank
    shape = value.shape if is_const(value) else value.shape.as_list()
    if len(shape) == 0:
        return _tensor(node, value)
    if len(shape) > 0 and np.prod([d if d is not None else 2 for d in shape]) == 1:
        return tf.reshape(_tensor(node, value), [])
    if not block_size:
        if len(shape) != 1:
            node.refuse(f"a scale/zero point of shape {list(shape)} without block_size "
                        "(ONNX needs a scalar or 1-D)")
        dims = [1] * rank
        dims[axis] = -1
        return tf.reshape(_tensor(node, value), dims)
    if len(shape) != rank:
        node.refuse(f"blocked quantization with a scale of rank {len(shape)} for input rank "
                    f"{rank}")
    repeated = tf.repeat(_tensor(node, value), block_size, axis=axis)
    return tf.gather(repeated, tf.range(tf.shape(x)[axis]), axis=axis)


def _quant_axis(node, x) -> int:
    axis = int(node.attr("axis", 1))
    rank = x.shape.rank
    return axis + rank if axis < 0 else axis


def _quant_check(info) -> Optional[str]:
    if info.op_type == "QuantizeLinear":
        out = info.attrs.get("output_dtype") or 0
        if out and out not in _QUANT_RANGES:
            return f"output_dtype {out} (supported: {_QUANT_NAMES})"
    return None


@op("QuantizeLinear", attrs={"axis": 1, "saturate": 1, "block_size": 0, "output_dtype": 0},
    check=_quant_check, since=10)
def quantize_linear(node):
    tf = _tf()
    x = node.t(0)
    if node.has(2):
        elem = _QUANT_ELEMS.get(node.dtype(2).name)
    else:
        elem = node.attr("output_dtype") or 2
    if elem not in _QUANT_RANGES:
        node.refuse(f"output type {node.dtype(2).name if node.has(2) else elem} "
                    f"(supported: {_QUANT_NAMES})", "quantize to 8- or 16-bit integers")
    if x.dtype not in (tf.float32, tf.float16, tf.int32):
        node.refuse(f"input of dtype {x.dtype.name}")
    axis = _quant_axis(node, x)
    block = int(node.attr("block_size") or 0)
    scale = _broadcast_param(node, node.value(1), x, axis, block)
    # numpy's promotion, as ONNX's reference divides (int32 / float32 -> float64)
    compute = tf.as_dtype(np.result_type(x.dtype.as_numpy_dtype, scale.dtype.as_numpy_dtype))
    scaled = tf.cast(x, compute) / tf.cast(scale, compute)
    rounded = tf.cast(tf.round(scaled), tf.float64)  # round half to even, as np.rint
    if node.has(2):
        zero = _broadcast_param(node, node.value(2), x, axis, block)
        rounded = rounded + tf.cast(zero, tf.float64)
    low, high = _QUANT_RANGES[elem]
    return tf.cast(tf.clip_by_value(rounded, low, high), dtypes.tf_dtype(elem))


@op("DequantizeLinear", attrs={"axis": 1, "block_size": 0}, since=10)
def dequantize_linear(node):
    tf = _tf()
    x = node.t(0)
    if x.dtype not in (tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32):
        node.refuse(f"input of dtype {x.dtype.name} (supported: {_QUANT_NAMES}/int32)",
                    "dequantize 8- or 16-bit integers")
    axis = _quant_axis(node, x)
    block = int(node.attr("block_size") or 0)
    scale = _broadcast_param(node, node.value(1), x, axis, block)
    if scale.dtype not in (tf.float32, tf.float16):
        node.refuse(f"scale of dtype {scale.dtype.name}")
    # ONNX's reference: x as float32 minus the zero point, times the scale (numpy promotion:
    # int32 zero points promote to float64), then the scale's dtype.
    compute = tf.float64 if (x.dtype == tf.int32 and node.has(2)) else tf.float32
    dx = tf.cast(x, compute)
    if node.has(2):
        if node.dtype(2) != x.dtype:
            node.refuse(f"zero point of dtype {node.dtype(2).name} for input {x.dtype.name}")
        dx = dx - tf.cast(_broadcast_param(node, node.value(2), x, axis, block), compute)
    return tf.cast(dx * tf.cast(scale, compute), scale.dtype)


@op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(node):
    tf = _tf()
    x = node.t(0)
    if x.dtype != tf.float32:
        node.refuse(f"input of dtype {x.dtype.name} (ONNX allows float32)")
    # ONNX's reference, step by step in float32: the range always includes 0.
    maxx = tf.maximum(0.0, tf.reduce_max(x))
    minx = tf.minimum(0.0, tf.reduce_min(x))
    span = tf.where(tf.equal(maxx, minx), tf.constant(1.0), maxx - minx)
    scale = span / 255.0
    zero = tf.round(tf.clip_by_value(0.0 - minx / scale, 0.0, 255.0))
    y = tf.clip_by_value(tf.round(x / scale) + zero, 0.0, 255.0)
    return [tf.cast(y, tf.uint8), scale, tf.cast(zero, tf.uint8)]
