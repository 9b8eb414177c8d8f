"""ONNX Cast and CastLike, with the narrow types (bfloat16, float8, 4-bit integers)
carried in wider ones (see onnx_tf/core.py for the handler contract).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.dtypes import NARROW_TYPES, NP_TYPES, np_dtype, type_name
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import REQUIRED, op

# --------------------------------------------------------------------------- casts


def _cast_target(to) -> int:
    """The ONNX element type of Cast's ``to`` (a name string before opset 6)."""
    if isinstance(to, str):
        import onnx
        return onnx.TensorProto.DataType.Value(to.upper())
    return int(to)


_CAST_FIX = "cast to a float, integer, bool, bfloat16, float8 or 4-bit integer type"


def _cast_check(info: NodeInfo) -> Optional[str]:
    try:
        elem = _cast_target(info.attrs.get("to"))
    except ValueError:
        return f"to={info.attrs.get('to')!r} is not an ONNX type"
    if elem not in NP_TYPES and elem not in NARROW_TYPES:
        return f"cast to {type_name(elem)} is not supported ({_CAST_FIX})"
    return None


def _cast_to(node, elem: int):
    tf = _tf()
    if elem not in NP_TYPES and elem not in NARROW_TYPES:
        node.refuse(f"cast to {type_name(elem)} is not supported", _CAST_FIX)
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
        node.refuse(f"cast to {type_name(elem)} without ONNX's inferred output type",
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
# dtypes.NARROW_TYPES says how each is held: bfloat16, FLOAT8E4M3FN and FLOAT8E5M2 in TF's own
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
        return f"cast to {type_name(target)} is not supported ({_CAST_FIX})"
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
