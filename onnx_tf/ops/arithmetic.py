"""ONNX arithmetic ops in ONNX semantics (see onnx_tf/core.py for the handler contract).

Every opset version. Broadcasting is numpy-style (opset >= 7); the legacy
``broadcast``/``axis`` attributes of opset < 7 are honoured. Where a TF CPU kernel is
missing for a dtype the value is computed in a wider type and cast back only where that
is exact; integer division truncates toward zero and integer ``Mod`` follows the
divisor's sign, as ONNX says (TF's ``//`` and ``%`` floor).
"""
from __future__ import annotations

from typing import Optional

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.cast import exact_cast
from tfx_bridge.onnx_tf.ops.elementwise_util import (
    CONSUMED,
    LEGACY_BCAST,
    _binary,
    _float_input,
    _is_unsigned,
    _variadic,
    is_float,
    is_int,
    legacy_check,
    numeric_input,
    same_dtype,
)
from tfx_bridge.onnx_tf.ops.matmul import bias_after_matmul
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- arithmetic


@op("Add", attrs={**LEGACY_BCAST, **CONSUMED}, check=legacy_check)
def add(node):
    if not node.folding and node.opset >= 7:
        for i in (0, 1):
            fused = bias_after_matmul(node, node.inputs[1 - i], node.maybe_const(i))
            if fused is not None:
                return fused
    a, b = _binary(node)
    same_dtype(node, a, b)
    return _tf().math.add(a, b)


@op("Sub", attrs={**LEGACY_BCAST, **CONSUMED}, check=legacy_check)
def sub(node):
    a, b = _binary(node)
    same_dtype(node, a, b)
    return _tf().math.subtract(a, b)


@op("Mul", attrs={**LEGACY_BCAST, **CONSUMED}, check=legacy_check)
def mul(node):
    a, b = _binary(node)
    same_dtype(node, a, b)
    return _tf().math.multiply(a, b)


@op("Div", attrs={**LEGACY_BCAST, **CONSUMED}, check=legacy_check)
def div(node):
    tf = _tf()
    a, b = _binary(node)
    same_dtype(node, a, b)
    if is_int(a.dtype):
        return tf.truncatediv(a, b)  # C semantics: toward zero (TF's // floors)
    return tf.math.divide(a, b)


def _mod_check(info: NodeInfo) -> Optional[str]:
    fmod = info.attrs.get("fmod")
    if fmod not in (0, 1):
        return f"fmod={fmod} (only 0 or 1 exist)"
    floats = (1, 10, 11)
    if fmod == 0 and any(t in floats for t in info.input_types if t):
        return "fmod=0 on floating-point inputs (ONNX requires fmod=1 for floats)"
    return None


@op("Mod", attrs={"fmod": 0}, check=_mod_check)
def mod(node):
    tf = _tf()
    a, b = _binary(node)
    same_dtype(node, a, b)
    dtype = a.dtype
    if node.attr("fmod") == 0:
        if is_float(dtype):
            node.refuse("fmod=0 on floating-point inputs",
                        "ONNX requires fmod=1 for floats")
        return tf.math.floormod(a, b)  # integer mod: sign of the divisor
    # fmod=1: C fmod, sign of the dividend. TF's TruncateMod lacks small ints and half.
    if _is_unsigned(dtype):
        return tf.math.floormod(a, b)  # both operands non-negative: fmod == mod
    if dtype in (tf.int8, tf.int16):
        return tf.cast(tf.truncatemod(tf.cast(a, tf.int32), tf.cast(b, tf.int32)), dtype)
    if dtype == tf.float16:  # fmod's result is exact in the operands' format
        return tf.cast(tf.truncatemod(tf.cast(a, tf.float32), tf.cast(b, tf.float32)), dtype)
    return tf.truncatemod(a, b)


@op("Pow", attrs=dict(LEGACY_BCAST), check=legacy_check)
def pow_(node):
    """Result has the base's dtype whatever the exponent's (opset >= 12 mixes them)."""
    tf = _tf()
    x, y = _binary(node)
    xt, yt = x.dtype, y.dtype
    if is_float(xt):
        if is_float(yt):
            wide = xt if xt.size >= yt.size else yt
        else:
            wide = tf.float32 if xt == tf.float16 else xt
        out = tf.math.pow(tf.cast(x, wide), tf.cast(y, wide))
        return exact_cast(out, xt)
    if is_float(yt):  # numpy computes int ** float in float64, then casts back
        out = tf.math.pow(tf.cast(x, tf.float64), tf.cast(y, tf.float64))
        return tf.cast(out, xt)
    # int ** int: int64 arithmetic wraps like the narrower type's, so casting back is exact
    out = tf.math.pow(tf.cast(x, tf.int64), tf.cast(y, tf.int64))
    return tf.cast(out, xt)


@op("Max", attrs=dict(CONSUMED))
def max_(node):
    return _variadic(node, _tf().math.maximum)


@op("Min", attrs=dict(CONSUMED))
def min_(node):
    return _variadic(node, _tf().math.minimum)


@op("Sum", attrs=dict(CONSUMED))
def sum_(node):
    return _variadic(node, _tf().math.add)  # add_n does not broadcast


@op("Mean", attrs=dict(CONSUMED))
def mean(node):
    tf = _tf()
    for i in range(node.n):
        if node.has(i):
            _float_input(node, i)
    total = _variadic(node, tf.math.add)
    count = sum(1 for i in range(node.n) if node.has(i))
    return total / tf.cast(count, total.dtype)


@op("Neg", attrs=dict(CONSUMED))
def neg(node):
    x = numeric_input(node, 0)
    if _is_unsigned(x.dtype):
        return _tf().math.subtract(_tf().zeros_like(x), x)  # wraps, like C
    return _tf().math.negative(x)


@op("Abs", attrs=dict(CONSUMED))
def abs_(node):
    x = numeric_input(node, 0)
    if _is_unsigned(x.dtype):
        return _tf().identity(x)
    return _tf().math.abs(x)


@op("Sign")
def sign(node):
    tf = _tf()
    x = numeric_input(node, 0)
    if _is_unsigned(x.dtype):
        return tf.cast(x > 0, x.dtype)
    return tf.math.sign(x)


@op("Reciprocal", attrs=dict(CONSUMED))
def reciprocal(node):
    return _tf().math.reciprocal(_float_input(node))


def _unary_float(name: str, fn_name: str, consumed: bool = False):
    def handler(node):
        tf = _tf()
        fn = tf.math
        for part in fn_name.split("."):
            fn = getattr(fn, part)
        return fn(_float_input(node))
    handler.__name__ = name.lower()
    op(name, attrs=dict(CONSUMED) if consumed else {})(handler)


for _name, _fn, _consumed in [
        ("Sqrt", "sqrt", True), ("Exp", "exp", True), ("Log", "log", True),
        ("Ceil", "ceil", True), ("Floor", "floor", True), ("Round", "round", False),
        ("Sin", "sin", False), ("Cos", "cos", False), ("Tan", "tan", False),
        ("Asin", "asin", False), ("Acos", "acos", False), ("Atan", "atan", False),
        ("Sinh", "sinh", False), ("Cosh", "cosh", False), ("Tanh", "tanh", True),
        ("Asinh", "asinh", False), ("Acosh", "acosh", False), ("Atanh", "atanh", False),
        ("Sigmoid", "sigmoid", True)]:
    _unary_float(_name, _fn, _consumed)  # tf.round is half to even, as ONNX


@op("Erf")
def erf(node):
    tf = _tf()
    x = numeric_input(node, 0)
    if is_float(x.dtype):
        return tf.math.erf(x)
    # integers (allowed since opset 13): erf in float64 truncated back, as the reference
    return tf.cast(tf.math.erf(tf.cast(x, tf.float64)), x.dtype)
