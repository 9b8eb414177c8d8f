"""ONNX tensor ops in ONNX semantics (see to_tf/core.py for the handler contract)."""
from __future__ import annotations

import numpy as np  # noqa: F401

from tfx_bridge.components.pytorch_model_importer.to_tf.core import REQUIRED, op  # noqa: F401


def _tf():
    import tensorflow as tf
    return tf


@op("Constant", attrs={"value": None, "value_float": None, "value_floats": None,
                       "value_int": None, "value_ints": None, "sparse_value": None,
                       "value_string": None, "value_strings": None},
    check=lambda info: ("a sparse or string constant is not supported"
                        if any(info.attrs.get(k) is not None for k in
                               ("sparse_value", "value_string", "value_strings")) else None))
def constant(node):
    from onnx import numpy_helper
    a = node.attrs
    if a.get("value") is not None:
        return numpy_helper.to_array(a["value"]).copy()
    if a.get("value_float") is not None:
        return np.array(a["value_float"], np.float32)
    if a.get("value_floats") is not None:
        return np.array(a["value_floats"], np.float32)
    if a.get("value_int") is not None:
        return np.array(a["value_int"], np.int64)
    if a.get("value_ints") is not None:
        return np.array(a["value_ints"], np.int64)
    node.refuse("a Constant with no value")


@op("Identity")
def identity(node):
    return node.value(0)
