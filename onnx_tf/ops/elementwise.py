"""ONNX elementwise ops in ONNX semantics (see to_tf/core.py for the handler contract).

Arithmetic, comparison, logical, bitwise, activation, math and cast ops, every opset
version. Broadcasting is numpy-style (opset >= 7); the legacy ``broadcast``/``axis``
attributes of opset < 7 are honoured. Where a TF CPU kernel is missing for a dtype the
value is computed in a wider type and cast back only where that is exact; integer
division truncates toward zero and integer ``Mod`` follows the divisor's sign, as ONNX
says (TF's ``//`` and ``%`` floor).

Size: an op table (about 90 ONNX ops, most a few lines over one shared
broadcast and dtype-widening helper).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.core import NARROW_TYPES, NP_TYPES, NodeInfo, np_dtype
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import REQUIRED, op

# --------------------------------------------------------------------------- helpers

_LEGACY_BCAST = {"broadcast": 0, "axis": None}
_CONSUMED = {"consumed_inputs": None}  # opset < 6 memory hint; no effect on values
_FLOAT_FIX = "ONNX defines this op on float16/float32/float64 only"


def _is_float(dtype) -> bool:
    return dtype.is_floating


def _is_int(dtype) -> bool:
    return dtype.is_integer


def _is_unsigned(dtype) -> bool:
    return dtype.is_unsigned


def _bits(dtype) -> int:
    return dtype.size * 8


def _float_input(node, i: int = 0):
    """Input ``i`` of a float-only op; other dtypes are refused by name."""
    dtype = node.dtype(i)
    if not _is_float(dtype):
        node.refuse(f"input {i} of dtype {dtype.name}", _FLOAT_FIX)
    return node.t(i)


def _numeric_input(node, i: int):
    dtype = node.dtype(i)
    if dtype == _tf().bool:
        node.refuse(f"input {i} of dtype bool", "ONNX defines this op on numeric types only")
    return node.t(i)


def _bool_input(node, i: int):
    dtype = node.dtype(i)
    if dtype != _tf().bool:
        node.refuse(f"input {i} of dtype {dtype.name}", "ONNX defines this op on bool only")
    return node.t(i)


def _int_input(node, i: int):
    dtype = node.dtype(i)
    if not _is_int(dtype):
        node.refuse(f"input {i} of dtype {dtype.name}",
                    "ONNX defines this op on integer types only")
    return node.t(i)


def _legacy_b(node, a, b):
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
    a = _numeric_input(node, 0) if numeric else node.t(0)
    b = _numeric_input(node, 1) if numeric else node.t(1)
    return a, _legacy_b(node, a, b)


def _same_dtype(node, a, b):
    if a.dtype != b.dtype:
        node.refuse(f"inputs of different dtypes ({a.dtype.name}, {b.dtype.name})",
                    "ONNX requires both inputs to have the same type; insert a Cast")


def _legacy_check(info: NodeInfo) -> Optional[str]:
    if info.opset < 7 and info.attrs.get("broadcast") not in (0, 1):
        return f"broadcast={info.attrs.get('broadcast')} (only 0 or 1 exist)"
    return None


def _variadic(node, fn):
    values = [_numeric_input(node, i) for i in range(node.n) if node.has(i)]
    if not values:
        node.refuse("no inputs")
    for v in values[1:]:
        _same_dtype(node, values[0], v)
    result = values[0]
    for v in values[1:]:
        result = fn(result, v)
    return result


# --------------------------------------------------------------------------- arithmetic


@op("Add", attrs={**_LEGACY_BCAST, **_CONSUMED}, check=_legacy_check)
def add(node):
    a, b = _binary(node)
    _same_dtype(node, a, b)
    return _tf().math.add(a, b)


@op("Sub", attrs={**_LEGACY_BCAST, **_CONSUMED}, check=_legacy_check)
def sub(node):
    a, b = _binary(node)
    _same_dtype(node, a, b)
    return _tf().math.subtract(a, b)


@op("Mul", attrs={**_LEGACY_BCAST, **_CONSUMED}, check=_legacy_check)
def mul(node):
    a, b = _binary(node)
    _same_dtype(node, a, b)
    return _tf().math.multiply(a, b)


@op("Div", attrs={**_LEGACY_BCAST, **_CONSUMED}, check=_legacy_check)
def div(node):
    tf = _tf()
    a, b = _binary(node)
    _same_dtype(node, a, b)
    if _is_int(a.dtype):
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
    _same_dtype(node, a, b)
    dtype = a.dtype
    if node.attr("fmod") == 0:
        if _is_float(dtype):
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


@op("Pow", attrs=dict(_LEGACY_BCAST), check=_legacy_check)
def pow_(node):
    """Result has the base's dtype whatever the exponent's (opset >= 12 mixes them)."""
    tf = _tf()
    x, y = _binary(node)
    xt, yt = x.dtype, y.dtype
    if _is_float(xt):
        if _is_float(yt):
            wide = xt if xt.size >= yt.size else yt
        else:
            wide = tf.float32 if xt == tf.float16 else xt
        out = tf.math.pow(tf.cast(x, wide), tf.cast(y, wide))
        return exact_cast(out, xt)
    if _is_float(yt):  # numpy computes int ** float in float64, then casts back
        out = tf.math.pow(tf.cast(x, tf.float64), tf.cast(y, tf.float64))
        return tf.cast(out, xt)
    # int ** int: int64 arithmetic wraps like the narrower type's, so casting back is exact
    out = tf.math.pow(tf.cast(x, tf.int64), tf.cast(y, tf.int64))
    return tf.cast(out, xt)


@op("Max", attrs=dict(_CONSUMED))
def max_(node):
    return _variadic(node, _tf().math.maximum)


@op("Min", attrs=dict(_CONSUMED))
def min_(node):
    return _variadic(node, _tf().math.minimum)


@op("Sum", attrs=dict(_CONSUMED))
def sum_(node):
    return _variadic(node, _tf().math.add)  # add_n does not broadcast


@op("Mean", attrs=dict(_CONSUMED))
def mean(node):
    tf = _tf()
    for i in range(node.n):
        if node.has(i):
            _float_input(node, i)
    total = _variadic(node, tf.math.add)
    count = sum(1 for i in range(node.n) if node.has(i))
    return total / tf.cast(count, total.dtype)


@op("Neg", attrs=dict(_CONSUMED))
def neg(node):
    x = _numeric_input(node, 0)
    if _is_unsigned(x.dtype):
        return _tf().math.subtract(_tf().zeros_like(x), x)  # wraps, like C
    return _tf().math.negative(x)


@op("Abs", attrs=dict(_CONSUMED))
def abs_(node):
    x = _numeric_input(node, 0)
    if _is_unsigned(x.dtype):
        return _tf().identity(x)
    return _tf().math.abs(x)


@op("Sign")
def sign(node):
    tf = _tf()
    x = _numeric_input(node, 0)
    if _is_unsigned(x.dtype):
        return tf.cast(x > 0, x.dtype)
    return tf.math.sign(x)


@op("Reciprocal", attrs=dict(_CONSUMED))
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
    op(name, attrs=dict(_CONSUMED) if consumed else {})(handler)


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
    x = _numeric_input(node, 0)
    if _is_float(x.dtype):
        return tf.math.erf(x)
    # integers (allowed since opset 13): erf in float64 truncated back, as the reference
    return tf.cast(tf.math.erf(tf.cast(x, tf.float64)), x.dtype)


# --------------------------------------------------------------------------- activations


@op("Relu", attrs=dict(_CONSUMED))
def relu(node):
    x = _numeric_input(node, 0)
    if _is_unsigned(x.dtype):
        return _tf().identity(x)
    return _tf().nn.relu(x)


@op("LeakyRelu", attrs={"alpha": 0.01, **_CONSUMED})
def leaky_relu(node):
    tf = _tf()
    x = _float_input(node)
    # TF's kernel is x > 0 ? x : x * alpha: the same values as ONNX's, any alpha
    return tf.nn.leaky_relu(x, alpha=float(node.attr("alpha")))


@op("PRelu", attrs=dict(_CONSUMED))
def prelu(node):
    tf = _tf()
    x = _numeric_input(node, 0)
    slope = _numeric_input(node, 1)
    _same_dtype(node, x, slope)
    if node.opset < 7:
        shape = slope.shape
        if not (shape.is_fully_defined() and shape.num_elements() == 1) and \
                shape.as_list() != x.shape.as_list():
            node.refuse("a per-channel slope at opset < 7 (no broadcasting rule then)",
                        "export at opset >= 9 with the slope shaped [C, 1, 1]")
    if _is_unsigned(x.dtype):
        return tf.identity(x)  # never negative; the slope broadcasts to x (unidirectional)
    return tf.where(x < 0, x * slope, x)


@op("Elu", attrs={"alpha": 1.0, **_CONSUMED})
def elu(node):
    tf = _tf()
    x = _float_input(node)
    alpha = tf.constant(node.attr("alpha"), x.dtype)
    return tf.where(x < 0, alpha * tf.math.expm1(tf.minimum(x, 0)), x)


@op("Celu", attrs={"alpha": 1.0})
def celu(node):
    tf = _tf()
    x = _float_input(node)
    alpha = tf.constant(node.attr("alpha"), x.dtype)
    neg_part = alpha * tf.math.expm1(tf.minimum(x, 0) / alpha)
    return tf.maximum(x, 0) + tf.minimum(neg_part, 0)


@op("Selu", attrs={"alpha": None, "gamma": None, **_CONSUMED})
def selu(node):
    tf = _tf()
    x = _float_input(node)
    old = node.opset < 6  # Selu-1's defaults are rounder
    alpha = node.attr("alpha")
    gamma = node.attr("gamma")
    if alpha is None:
        alpha = 1.673200011253357 if old else 1.67326319217681884765625
    if gamma is None:
        gamma = 1.0506999492645264 if old else 1.05070102214813232421875
    alpha = tf.constant(alpha, x.dtype)
    gamma = tf.constant(gamma, x.dtype)
    return gamma * tf.where(x > 0, x, alpha * tf.math.expm1(tf.minimum(x, 0)))


@op("HardSigmoid", attrs={"alpha": 0.2, "beta": 0.5, **_CONSUMED})
def hard_sigmoid(node):
    tf = _tf()
    x = _float_input(node)
    alpha = tf.constant(node.attr("alpha"), x.dtype)
    beta = tf.constant(node.attr("beta"), x.dtype)
    return tf.clip_by_value(alpha * x + beta, tf.constant(0, x.dtype), tf.constant(1, x.dtype))


@op("HardSwish")
def hard_swish(node):
    tf = _tf()
    x = _float_input(node)
    gate = x * tf.constant(1 / 6, x.dtype) + tf.constant(0.5, x.dtype)
    return x * tf.clip_by_value(gate, tf.constant(0, x.dtype), tf.constant(1, x.dtype))


@op("Softplus")
def softplus(node):
    return _tf().math.softplus(_float_input(node))


@op("Softsign")
def softsign(node):
    return _tf().nn.softsign(_float_input(node))


@op("Mish")
def mish(node):
    tf = _tf()
    x = _float_input(node)
    return x * tf.math.tanh(tf.math.softplus(x))


def _gelu_check(info: NodeInfo) -> Optional[str]:
    if info.attrs.get("approximate") not in ("none", "tanh"):
        return f"approximate={info.attrs.get('approximate')!r} (only 'none' and 'tanh' exist)"
    return None


@op("Gelu", attrs={"approximate": "none"}, check=_gelu_check)
def gelu(node):
    tf = _tf()
    x = _float_input(node)
    half = tf.constant(0.5, x.dtype)
    one = tf.constant(1.0, x.dtype)
    if node.attr("approximate") == "tanh":
        inner = tf.constant(math.sqrt(2 / math.pi), x.dtype) * (
            x + tf.constant(0.044715, x.dtype) * x * x * x)
        return half * x * (one + tf.math.tanh(inner))
    return half * x * (one + tf.math.erf(x * tf.constant(1 / math.sqrt(2), x.dtype)))


@op("ThresholdedRelu", attrs={"alpha": 1.0})
def thresholded_relu(node):
    tf = _tf()
    x = _float_input(node)
    return tf.where(x > tf.constant(node.attr("alpha"), x.dtype), x, tf.zeros_like(x))


@op("Shrink", attrs={"bias": 0.0, "lambd": 0.5})
def shrink(node):
    tf = _tf()
    x = _numeric_input(node, 0)
    dtype = x.dtype
    # integers: computed in float64 and truncated back, as ONNX's reference does
    xf = x if _is_float(dtype) else tf.cast(x, tf.float64)
    bias = tf.constant(node.attr("bias"), xf.dtype)
    lambd = tf.constant(node.attr("lambd"), xf.dtype)
    out = tf.where(xf < -lambd, xf + bias, tf.where(xf > lambd, xf - bias, tf.zeros_like(xf)))
    return out if out.dtype == dtype else tf.cast(out, dtype)


def _clip_bound(node, name: str, x):
    """Clip's bound ``name`` ('min'/'max') in x's dtype, or None for no bound."""
    tf = _tf()
    if node.opset >= 11:
        i = 1 if name == "min" else 2
        if not node.has(i):
            return None
        bound = node.t(i)
        if bound.dtype != x.dtype:
            node.refuse(f"{name} of dtype {bound.dtype.name} for input {x.dtype.name}",
                        "ONNX requires the bounds to have the input's type")
        if bound.shape.rank not in (None, 0) and bound.shape.num_elements() != 1:
            node.refuse(f"a non-scalar {name} (shape {bound.shape})", "pass a scalar bound")
        return tf.reshape(bound, [])
    if not _is_float(x.dtype):
        node.refuse(f"Clip-{6 if node.opset >= 6 else 1} on dtype {x.dtype.name}",
                    "export at opset >= 12 (integer Clip)")
    value = node.attr(name)
    if value is None:
        if node.opset < 6:
            return None  # Clip-1: an absent bound does not clip
        value = 3.4028234663852886e38 * (-1 if name == "min" else 1)
    return tf.constant(value, x.dtype)


@op("Clip", attrs={"min": None, "max": None, **_CONSUMED})
def clip(node):
    tf = _tf()
    x = _numeric_input(node, 0)
    low, high = _clip_bound(node, "min", x), _clip_bound(node, "max", x)
    # min > max gives max everywhere (ONNX), which this order of min/max produces
    if low is not None:
        x = tf.math.maximum(x, low)
    if high is not None:
        x = tf.math.minimum(x, high)
    return x if low is not None or high is not None else tf.identity(x)


def _dropout_check(info: NodeInfo) -> Optional[str]:
    if info.opset < 7 and not info.attrs.get("is_test") and info.attrs.get("ratio") != 0:
        return ("training-mode Dropout (is_test=0, the default before opset 7) with ratio "
                f"{info.attrs.get('ratio')}")
    return None


@op("Dropout", attrs={"ratio": 0.5, "is_test": 0, "seed": None, **_CONSUMED},
    check=_dropout_check)
def dropout(node):
    """Inference: the input unchanged, the mask all True (1 before opset 10)."""
    tf = _tf()
    _float_input(node)
    if node.opset < 7 and not node.attr("is_test") and node.attr("ratio") != 0:
        node.refuse("training-mode Dropout (is_test=0)",
                    "export in eval mode (model.eval()) or at opset >= 7")
    if node.opset >= 12:
        training = False
        if node.has(2):
            mode = node.maybe_const(2)
            if mode is None:
                node.refuse("a run-time training_mode (training-mode Dropout is random)",
                            "export in eval mode (model.eval()) so training_mode is absent "
                            "or a constant False")
            training = bool(np.asarray(mode).reshape(-1)[0])
        if training:
            ratio = node.maybe_const(1) if node.has(1) else np.array(0.5)
            if ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
                node.refuse("training_mode=True with a non-zero (or run-time) ratio: random "
                            "output", "export in eval mode (model.eval())")
    x = node.value(0)
    outputs = [x]
    if len(node.proto.output) > 1 and node.proto.output[1]:
        mask_dtype = tf.bool if node.opset >= 10 else node.dtype(0)
        outputs.append(tf.ones_like(node.t(0), dtype=mask_dtype))
    return outputs


# --------------------------------------------------------------------------- comparison / logic


def _compare(name: str, fn_name: str, legacy: bool):
    def handler(node):
        tf = _tf()
        a, b = _binary(node, numeric=name != "Equal")  # Equal also takes bool
        _same_dtype(node, a, b)
        return getattr(tf.math, fn_name)(a, b)
    handler.__name__ = name.lower()
    op(name, attrs=dict(_LEGACY_BCAST) if legacy else {},
       check=_legacy_check if legacy else None)(handler)


for _name, _fn, _legacy in [("Equal", "equal", True), ("Greater", "greater", True),
                            ("Less", "less", True), ("GreaterOrEqual", "greater_equal", False),
                            ("LessOrEqual", "less_equal", False)]:
    _compare(_name, _fn, _legacy)


def _logical(name: str, fn_name: str):
    def handler(node):
        a = _bool_input(node, 0)
        b = _legacy_b(node, a, _bool_input(node, 1))
        return getattr(_tf().math, fn_name)(a, b)
    handler.__name__ = name.lower()
    op(name, attrs=dict(_LEGACY_BCAST), check=_legacy_check)(handler)


for _name, _fn in [("And", "logical_and"), ("Or", "logical_or"), ("Xor", "logical_xor")]:
    _logical(_name, _fn)


@op("Not")
def not_(node):
    return _tf().math.logical_not(_bool_input(node, 0))


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
    cond = _bool_input(node, 0)
    x, y = node.t(1), node.t(2)
    _same_dtype(node, x, y)
    return tf.where(cond, x, y)  # where_v2: numpy broadcasting of all three


# --------------------------------------------------------------------------- bitwise


def _bitwise(name: str, fn_name: str):
    def handler(node):
        a, b = _int_input(node, 0), _int_input(node, 1)
        _same_dtype(node, a, b)
        return getattr(_tf().bitwise, fn_name)(a, b)
    handler.__name__ = name.lower()
    op(name)(handler)


for _name, _fn in [("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"),
                   ("BitwiseXor", "bitwise_xor")]:
    _bitwise(_name, _fn)


@op("BitwiseNot")
def bitwise_not(node):
    return _tf().bitwise.invert(_int_input(node, 0))


def _bitshift_check(info: NodeInfo) -> Optional[str]:
    if info.attrs.get("direction") not in ("LEFT", "RIGHT"):
        return f"direction={info.attrs.get('direction')!r} (only 'LEFT' and 'RIGHT' exist)"
    return None


@op("BitShift", attrs={"direction": REQUIRED}, check=_bitshift_check)
def bit_shift(node):
    tf = _tf()
    x, y = _int_input(node, 0), _int_input(node, 1)
    _same_dtype(node, x, y)
    if not _is_unsigned(x.dtype):
        node.refuse(f"signed input dtype {x.dtype.name}",
                    "ONNX defines BitShift on unsigned integers only")
    fn = tf.bitwise.left_shift if node.attr("direction") == "LEFT" else tf.bitwise.right_shift
    shifted = fn(x, y)
    # TF clamps shifts >= the bit width; ONNX (numpy, C on unsigned) shifts everything out
    return tf.where(y < tf.constant(_bits(x.dtype), x.dtype), shifted, tf.zeros_like(shifted))


# --------------------------------------------------------------------------- casts


def _cast_target(to) -> int:
    """The ONNX element type of Cast's ``to`` (a name string before opset 6)."""
    if isinstance(to, str):
        import onnx
        return onnx.TensorProto.DataType.Value(to.upper())
    return int(to)


def _type_name(elem: int) -> str:
    import onnx
    try:
        return onnx.TensorProto.DataType.Name(elem)
    except ValueError:
        return str(elem)


_CAST_FIX = "cast to a float, integer, bool, bfloat16, float8 or 4-bit integer type"


def _cast_check(info: NodeInfo) -> Optional[str]:
    try:
        elem = _cast_target(info.attrs.get("to"))
    except ValueError:
        return f"to={info.attrs.get('to')!r} is not an ONNX type"
    if elem not in NP_TYPES and elem not in NARROW_TYPES:
        return f"cast to {_type_name(elem)} is not supported ({_CAST_FIX})"
    return None


def _cast_to(node, elem: int):
    tf = _tf()
    if elem not in NP_TYPES and elem not in NARROW_TYPES:
        node.refuse(f"cast to {_type_name(elem)} is not supported", _CAST_FIX)
    src = _narrow_source(node, 0)
    if src is None and elem not in NARROW_TYPES:
        target = tf.as_dtype(NP_TYPES[elem])
        x = node.value(0)
        if isinstance(x, np.ndarray):
            if x.dtype == target.as_numpy_dtype:
                return x
        elif x.dtype == target:
            return x
        return exact_cast(node.t(0), target)
    if src == elem:
        return node.value(0)
    if elem in _AMBIGUOUS and _onnx_type(node, node.proto.output[0]) != elem:
        # A uint8/int8 carrier is only read right where ONNX's type says what it holds.
        node.refuse(f"cast to {_type_name(elem)} without ONNX's inferred output type",
                    "run ONNX shape inference on the model first")
    x = node.t(0)
    if src in _INT4_RANGE and elem not in NARROW_TYPES:
        return tf.cast(x, tf.as_dtype(NP_TYPES[elem]))  # int8/uint8 values: as ONNX's astype
    y = narrow_to_float32(x, src) if src is not None else exact_cast(x, tf.float32)
    if elem not in NARROW_TYPES:
        return exact_cast(y, tf.as_dtype(NP_TYPES[elem]))
    return float32_to_narrow(y, elem, bool(node.attr("saturate", 1)))


# ----------------------------------------------------------------- bfloat16, float8, int4
#
# core.NARROW_TYPES says how each is held: bfloat16, FLOAT8E4M3FN and FLOAT8E5M2 in TF's own
# dtypes, the FNUZ float8 types as their uint8 bit patterns, INT4/UINT4 as int8/uint8
# values. Casts to and from them go through float32, as ONNX's reference does; float8
# rounding (to nearest even) and overflow are computed here, exactly per Cast-19's tables:
# TF's own casts overflow to NaN/inf only and know no FNUZ type.

# float8 formats: mantissa bits, exponent bias, largest finite value, overflow without
# saturate (ONNX: E4M3FN and the FNUZ types to NaN, E5M2 to inf)
_F8 = {17: (3, 7, 448.0, math.nan), 18: (3, 8, 240.0, math.nan),
       19: (2, 15, 57344.0, math.inf), 20: (2, 16, 57344.0, math.nan)}
_FNUZ = {18: "float8_e4m3fnuz", 20: "float8_e5m2fnuz"}
_INT4_RANGE = {21: (0, 15), 22: (-8, 7)}
_AMBIGUOUS = (18, 20, 21, 22)  # carriers (uint8/int8) that are also plain ONNX types
_NATIVE = {"bfloat16": 16, "float8_e4m3fn": 17, "float8_e5m2": 19}


def _onnx_type(node, name: str) -> Optional[int]:
    """ONNX's element type of value ``name`` (value_info, else an initializer's), if known."""
    if not name:
        return None
    elem, _ = node.graph.converter.expected(name, node.graph.value_info_of(name))
    if elem:
        return elem
    for init in node.graph.converter.model.graph.initializer:
        if init.name == name:
            return init.data_type
    return None


def _narrow_source(node, i: int) -> Optional[int]:
    """The narrow ONNX type input ``i`` holds in its carrier; None for a plain dtype (a
    narrow-typed initializer arrives as numpy_helper's exact float32 values: plain)."""
    dtype = node.dtype(i)
    if dtype.name in _NATIVE:
        return _NATIVE[dtype.name]
    elem = _onnx_type(node, node.proto.input[i])
    if elem in _AMBIGUOUS and dtype == _tf().as_dtype(np_dtype(elem)):
        return elem
    return None


def narrow_to_float32(x, elem: int):
    """The values of ``x`` (narrow type ``elem`` in its carrier) as float32: exact."""
    tf = _tf()
    if elem in _FNUZ:  # decode the bit patterns through a 256-entry table
        import ml_dtypes
        table = np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, _FNUZ[elem]))
        return tf.gather(tf.constant(table.astype(np.float32)), tf.cast(x, tf.int32))
    return tf.cast(x, tf.float32)


def _pow2(e):
    """2**e as float32 for int32 ``e`` in [-126, 127], built from the exponent bits."""
    tf = _tf()
    return tf.bitcast(tf.bitwise.left_shift(e + 127, 23), tf.float32)


def float32_to_narrow(y, elem: int, saturate: bool = True):
    """float32 ``y`` cast to narrow type ``elem`` (its carrier), as ONNX's Cast says.

    bfloat16 rounds to nearest even (TF's cast, as torch and onnxruntime do); float8 to
    nearest even with Cast-19's overflow rules; INT4/UINT4 round half to even and clip
    (ONNX's reference), NaN to 0 (ONNX leaves it undefined).
    """
    tf = _tf()
    if elem == 16:
        return tf.cast(y, tf.bfloat16)
    if elem in _INT4_RANGE:
        low, high = _INT4_RANGE[elem]
        r = tf.round(tf.clip_by_value(y, float(low), float(high)))
        r = tf.where(tf.math.is_nan(y), tf.zeros_like(r), r)
        return tf.cast(r, tf.int8 if elem == 22 else tf.uint8)
    mbits, bias, largest, overflow = _F8[elem]
    emin = 1 - bias
    negative = tf.bitcast(y, tf.int32) < 0  # the sign bit: -0 and tiny negatives too
    a = tf.abs(y)
    exponent = tf.bitwise.right_shift(tf.bitcast(a, tf.int32), 23) - 127
    quantum = _pow2(tf.maximum(exponent, emin) - mbits)  # the format's spacing at |y|
    r = tf.round(a / quantum) * quantum  # exact scaling; tf.round is half to even
    r = tf.where(r > largest, tf.fill(tf.shape(r), largest if saturate else overflow), r)
    if elem not in _FNUZ:
        signed = tf.where(negative, -r, r)
        return tf.cast(signed, tf.as_dtype(np_dtype(elem)))  # exact: r is representable
    # FNUZ bit patterns: no negative zero, NaN (and overflow without saturate) is 0x80
    bits = tf.bitcast(tf.where(tf.math.is_nan(r), tf.zeros_like(r), r), tf.int32)
    normal = tf.bitwise.bitwise_or(
        tf.bitwise.left_shift(tf.bitwise.right_shift(bits, 23) - 127 + bias, mbits),
        tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits, 23 - mbits), (1 << mbits) - 1))
    sub = tf.cast(r / _pow2(tf.constant(emin - mbits)), tf.int32)
    code = tf.where(r >= 2.0 ** emin, normal, sub)
    code = tf.where(negative & (code != 0), tf.bitwise.bitwise_or(code, 0x80), code)
    code = tf.where(tf.math.is_nan(r), tf.fill(tf.shape(code), 0x80), code)
    return tf.cast(code, tf.uint8)


def exact_cast(x, target):
    """tf.cast, but float64 -> float16 rounds once (TF's goes through float32 and can
    round twice, 1 ulp off numpy/ONNX): round to float32 with round-to-odd first, which
    makes the second rounding exact."""
    tf = _tf()
    if not (x.dtype == tf.float64 and target == tf.float16):
        return tf.cast(x, target)
    f = tf.cast(x, tf.float32)
    back = tf.cast(f, tf.float64)
    bits = tf.bitcast(f, tf.int32)
    # toward zero: one step down in magnitude where nearest rounded away (|f| > |x|)
    bits = tf.where(tf.abs(back) > tf.abs(x), bits - 1, bits)
    bits = tf.where(tf.not_equal(back, x), tf.bitwise.bitwise_or(bits, 1), bits)  # sticky
    return tf.cast(tf.bitcast(bits, tf.float32), tf.float16)


@op("Cast", attrs={"to": REQUIRED, "saturate": 1}, check=_cast_check)
def cast(node):
    """Float to integer truncates toward zero (C); ``saturate`` only concerns float8."""
    return _cast_to(node, _cast_target(node.attr("to")))


def _castlike_check(info: NodeInfo) -> Optional[str]:
    target = info.input_types[1] if len(info.input_types) > 1 else None
    if target and target not in NP_TYPES and target not in NARROW_TYPES:
        return f"cast to {_type_name(target)} is not supported ({_CAST_FIX})"
    return None


@op("CastLike", attrs={"saturate": 1}, check=_castlike_check)
def cast_like(node):
    # ONNX's type of the output (= input 1's), not the carrier's: uint8 may hold FNUZ bits
    elem = _onnx_type(node, node.proto.output[0]) or _onnx_type(node, node.proto.input[1])
    if not elem:
        from onnx import helper
        dtype = node.dtype(1)
        elem = _NATIVE.get(dtype.name) or helper.np_dtype_to_tensor_dtype(
            np.dtype(dtype.as_numpy_dtype))
    return _cast_to(node, elem)
