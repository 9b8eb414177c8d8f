"""Helpers the elementwise op modules share: input dtype checks, ONNX's legacy
broadcast attributes, binary and variadic application.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.lazy import tf as _tf

# --------------------------------------------------------------------------- helpers

LEGACY_BCAST = {"broadcast": 0, "axis": None}
CONSUMED = {"consumed_inputs": None}  # opset < 6 memory hint; no effect on values
_FLOAT_FIX = "ONNX defines this op on float16/float32/float64 only"


def is_float(dtype) -> bool:
    return dtype.is_floating


def is_int(dtype) -> bool:
    return dtype.is_integer


def _is_unsigned(dtype) -> bool:
    return dtype.is_unsigned


def _bits(dtype) -> int:
    return dtype.size * 8


def _float_input(node, i: int = 0):
    """Input ``i`` of a float-only op; other dtypes are refused by name."""
    dtype = node.dtype(i)
    if not is_float(dtype):
        node.refuse(f"input {i} of dtype {dtype.name}", _FLOAT_FIX)
    return node.t(i)


def numeric_input(node, i: int):
    dtype = node.dtype(i)
    if dtype == _tf().bool:
        node.refuse(f"input {i} of dtype bool", "ONNX defines this op on numeric types only")
    return node.t(i)


def bool_input(node, i: int):
    dtype = node.dtype(i)
    if dtype != _tf().bool:
        node.refuse(f"input {i} of dtype {dtype.name}", "ONNX defines this op on bool only")
    return node.t(i)


def int_input(node, i: int):
    dtype = node.dtype(i)
    if not is_int(dtype):
        node.refuse(f"input {i} of dtype {dtype.name}",
                    "ONNX defines this op on integer types only")
    return node.t(i)


def legacy_b(node, a, b):
    """``b`` aligned to ``a`` per opset < 7's ``broadcast``/``axis`` attributes.

    broadcast=1 puts b's dims at a's dims ``axis..axis+rank(b)`` (suffix by default,
    which numpy broadcasting already does); broadcast=0 means equal shapes.
    """
    if node.opset >= 7 or not node.attr("broadcast"):
        return b
    axis = node.attr("axis")
    if axis is None:
        return b
    rank_a, rank_b = a.shape.rank, b.shape.rank
    if rank_a is None or rank_b is None:
        node.refuse("legacy axis broadcast with an unknown rank",
                    "export at opset >= 7 (numpy-style broadcasting)")
    if axis < 0:
        axis += rank_a
    trailing = rank_a - axis - rank_b
    if trailing < 0:
        node.refuse(f"legacy broadcast axis {axis} does not fit ranks {rank_a}/{rank_b}")
    if trailing == 0:
        return b
    tf = _tf()
    shape = tf.concat([tf.shape(b), tf.ones([trailing], tf.int32)], 0)
    return tf.reshape(b, shape)


def _binary(node, numeric: bool = True):
    a = numeric_input(node, 0) if numeric else node.t(0)
    b = numeric_input(node, 1) if numeric else node.t(1)
    return _bias_safe(node, a, legacy_b(node, a, b))


def _bias_safe(node, a, b):
    """(a, b) with a constant beside a BiasAdd's output shaped as a BiasAdd input.

    TF 2.16's constant folding (Grappler) turns ``BiasAdd(x, c1) + c2`` into
    ``BiasAdd(c2, c1) + x``, which fails at run time when c2's last axis is 1 where
    the bias has n: such a c2 gets its last axis broadcast to n (a scalar if it has
    one element); same values.
    """
    out = [a, b]
    if node.opset < 7:
        return tuple(out)
    for i in (0, 1):
        other = out[1 - i]
        c = node.maybe_const(i)
        producer = getattr(other, "op", None)
        if c is None or c.ndim == 0 or producer is None or producer.type != "BiasAdd":
            continue
        n = other.shape[-1]
        if c.shape[-1] != 1 or n is None or n == 1:
            continue
        c = c.reshape(()) if c.size == 1 else np.broadcast_to(c, (*c.shape[:-1], n))
        out[i] = node.graph.converter.tensor(np.ascontiguousarray(c), node.folding)
    return tuple(out)


def same_dtype(node, a, b):
    if a.dtype != b.dtype:
        node.refuse(f"inputs of different dtypes ({a.dtype.name}, {b.dtype.name})",
                    "ONNX requires both inputs to have the same type; insert a Cast")


def legacy_check(info: NodeInfo) -> Optional[str]:
    if info.opset < 7 and info.attrs.get("broadcast") not in (0, 1):
        return f"broadcast={info.attrs.get('broadcast')} (only 0 or 1 exist)"
    return None


def _variadic(node, fn):
    values = [numeric_input(node, i) for i in range(node.n) if node.has(i)]
    if not values:
        node.refuse("no inputs")
    for v in values[1:]:
        same_dtype(node, values[0], v)
    result = values[0]
    for v in values[1:]:
        result = fn(result, v)
    return result
