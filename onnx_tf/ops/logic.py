"""ONNX comparison, logic and bitwise ops (see onnx_tf/core.py for the handler contract).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.elementwise_util import (
    LEGACY_BCAST,
    _binary,
    _bits,
    _float_input,
    _is_unsigned,
    bool_input,
    int_input,
    legacy_b,
    legacy_check,
    same_dtype,
)
from tfx_bridge.onnx_tf.registry import REQUIRED, op

# --------------------------------------------------------------------------- comparison / logic


def _compare(name: str, fn_name: str, legacy: bool):
    def handler(node):
        tf = _tf()
        a, b = _binary(node, numeric=name != "Equal")  # Equal also takes bool
        same_dtype(node, a, b)
        return getattr(tf.math, fn_name)(a, b)
    handler.__name__ = name.lower()
    op(name, attrs=dict(LEGACY_BCAST) if legacy else {},
       check=legacy_check if legacy else None)(handler)


for _name, _fn, _legacy in [("Equal", "equal", True), ("Greater", "greater", True),
                            ("Less", "less", True), ("GreaterOrEqual", "greater_equal", False),
                            ("LessOrEqual", "less_equal", False)]:
    _compare(_name, _fn, _legacy)


def _logical(name: str, fn_name: str):
    def handler(node):
        a = bool_input(node, 0)
        b = legacy_b(node, a, bool_input(node, 1))
        return getattr(_tf().math, fn_name)(a, b)
    handler.__name__ = name.lower()
    op(name, attrs=dict(LEGACY_BCAST), check=legacy_check)(handler)


for _name, _fn in [("And", "logical_and"), ("Or", "logical_or"), ("Xor", "logical_xor")]:
    _logical(_name, _fn)


@op("Not")
def not_(node):
    return _tf().math.logical_not(bool_input(node, 0))


@op("IsNaN")
def is_nan(node):
    return _tf().math.is_nan(_float_input(node))


@op("IsInf", attrs={"detect_negative": 1, "detect_positive": 1})
def is_inf(node):
    tf = _tf()
    x = _float_input(node)
    neg, pos = bool(node.attr("detect_negative")), bool(node.attr("detect_positive"))
    if neg and pos:
        return tf.math.is_inf(x)
    if pos:
        return tf.math.equal(x, tf.constant(np.inf, x.dtype))
    if neg:
        return tf.math.equal(x, tf.constant(-np.inf, x.dtype))
    return tf.zeros_like(x, dtype=tf.bool)


@op("Where")
def where(node):
    tf = _tf()
    cond = bool_input(node, 0)
    x, y = node.t(1), node.t(2)
    same_dtype(node, x, y)
    return tf.where(cond, x, y)  # where_v2: numpy broadcasting of all three


# --------------------------------------------------------------------------- bitwise


def _bitwise(name: str, fn_name: str):
    def handler(node):
        a, b = int_input(node, 0), int_input(node, 1)
        same_dtype(node, a, b)
        return getattr(_tf().bitwise, fn_name)(a, b)
    handler.__name__ = name.lower()
    op(name)(handler)


for _name, _fn in [("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"),
                   ("BitwiseXor", "bitwise_xor")]:
    _bitwise(_name, _fn)


@op("BitwiseNot")
def bitwise_not(node):
    return _tf().bitwise.invert(int_input(node, 0))


def _bitshift_check(info: NodeInfo) -> Optional[str]:
    if info.attrs.get("direction") not in ("LEFT", "RIGHT"):
        return f"direction={info.attrs.get('direction')!r} (only 'LEFT' and 'RIGHT' exist)"
    return None


@op("BitShift", attrs={"direction": REQUIRED}, check=_bitshift_check)
def bit_shift(node):
    tf = _tf()
    x, y = int_input(node, 0), int_input(node, 1)
    same_dtype(node, x, y)
    if not _is_unsigned(x.dtype):
        node.refuse(f"signed input dtype {x.dtype.name}",
                    "ONNX defines BitShift on unsigned integers only")
    fn = tf.bitwise.left_shift if node.attr("direction") == "LEFT" else tf.bitwise.right_shift
    shifted = fn(x, y)
    # TF clamps shifts >= the bit width; ONNX (numpy, C on unsigned) shifts everything out
    return tf.where(y < tf.constant(_bits(x.dtype), x.dtype), shifted, tf.zeros_like(shifted))
