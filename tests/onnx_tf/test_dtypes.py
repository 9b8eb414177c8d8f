"""ONNX element types as the converter holds them (onnx_tf/dtypes.py)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")

import ml_dtypes  # noqa: E402
from onnx import TensorProto  # noqa: E402

from tfx_bridge.onnx_tf import Unsupported  # noqa: E402
from tfx_bridge.onnx_tf.dtypes import as_carrier, np_dtype, type_name  # noqa: E402


def test_as_carrier_bfloat16_exact_in_tf_dtype():
    values = np.array([1.0, -2.5, 0.0078125], np.float32)  # every one a bfloat16 value
    held = as_carrier(values, TensorProto.BFLOAT16)
    assert held.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(held.astype(np.float32), values)


def test_as_carrier_fnuz_float8_bit_patterns():
    values = np.array([1.0, -0.5], np.float32)
    held = as_carrier(values, TensorProto.FLOAT8E4M3FNUZ)
    assert held.dtype == np.uint8
    back = held.view(ml_dtypes.float8_e4m3fnuz).astype(np.float32)
    np.testing.assert_array_equal(back, values)


def test_as_carrier_plain_type_unchanged():
    values = np.arange(3, dtype=np.int64)
    assert as_carrier(values, TensorProto.INT64) is values


def test_np_dtype_string_refused_naming_type():
    assert np_dtype(TensorProto.FLOAT) is np.float32
    with pytest.raises(Unsupported, match="element type STRING is not supported"):
        np_dtype(TensorProto.STRING)
    assert type_name(TensorProto.BFLOAT16) == "BFLOAT16"
    assert type_name(999) == "999"
