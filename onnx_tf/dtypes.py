"""ONNX element types as the converter holds them: numpy and TF dtypes, and the
narrow types (bfloat16, float8, int4) only Cast and CastLike take, each in a carrier
dtype. No TFX imports.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.errors import Unsupported
from tfx_bridge.onnx_tf.lazy import tf as _tf

# ONNX TensorProto element types -> numpy dtypes the converter handles.
NP_TYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
             7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
             13: np.uint64}


# Element types only the ops in NARROW_TYPE_OPS handle (check_model refuses them anywhere
# else), each held in a carrier dtype: TF's own bfloat16/float8 dtypes where TF has them,
# the FNUZ float8 types as their uint8 bit patterns and INT4/UINT4 as int8/uint8 values
# (TF has no such dtype or no kernels for it). Any other op would misread a carrier.
NARROW_TYPES = {16: "bfloat16", 17: "float8_e4m3fn", 18: "uint8", 19: "float8_e5m2",
                20: "uint8", 21: "uint8", 22: "int8"}
NARROW_TYPE_OPS = frozenset({"Cast", "CastLike"})
DTYPE_ATTRS = ("to", "dtype", "output_dtype")  # attributes naming an element type


def carrier_of(elem_type: Optional[int]):
    """numpy dtype holding ONNX element type ``elem_type``; None if there is none."""
    if elem_type in NP_TYPES:
        return np.dtype(NP_TYPES[elem_type])
    name = NARROW_TYPES.get(elem_type)
    if name is None:
        return None
    if name in ("uint8", "int8"):
        return np.dtype(name)
    import ml_dtypes  # ships with TensorFlow: its numpy bfloat16/float8 types
    return np.dtype(getattr(ml_dtypes, name))


def as_carrier(array: np.ndarray, elem_type: int) -> np.ndarray:
    """A value of element type ``elem_type`` as onnx's numpy_helper.to_array returns it
    (float32 values for bfloat16/float8, in onnx 1.16), in its carrier dtype: exact, as
    every such value is one of the type's."""
    array = np.asarray(array)
    carrier = carrier_of(elem_type)
    if carrier is None or array.dtype == carrier:
        return array
    if elem_type in (18, 20):  # FNUZ float8: bit patterns
        import ml_dtypes
        fnuz = ml_dtypes.float8_e4m3fnuz if elem_type == 18 else ml_dtypes.float8_e5m2fnuz
        return array.astype(np.float32).astype(fnuz).view(np.uint8)
    return array.astype(carrier)


def type_name(elem_type: int) -> str:
    """ONNX's name of an element type (``FLOAT``, ``BFLOAT16``), or the number if unknown."""
    import onnx
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def np_dtype(elem_type: int):
    """numpy (carrier) dtype of an ONNX element type; Unsupported for strings, complex, ..."""
    carrier = carrier_of(elem_type)
    if carrier is None:
        import onnx
        name = onnx.TensorProto.DataType.Name(elem_type)
        raise Unsupported(f"element type {name} is not supported",
                          "use float32/float64/float16 or an integer/bool type")
    return carrier.type


def tf_dtype(elem_type: int):
    return _tf().as_dtype(np_dtype(elem_type))
