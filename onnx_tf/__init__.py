"""ONNX -> TensorFlow, op by op in ONNX semantics: the converter as a library.

It imports nothing else from tfx-bridge and no TFX (a rule in tests/test_layout.py);
TensorFlow and onnx are imported when a model is converted. The public API is
below; docs/ONNX_TF.md describes it.

>>> from tfx_bridge.onnx_tf import ConversionFailed, convert, load_for_conversion, save
"""
from tfx_bridge.onnx_tf.check import check_model
from tfx_bridge.onnx_tf.core import CONVERTER, Converted, convert, load_for_conversion, save
from tfx_bridge.onnx_tf.errors import ConversionFailed, OnnxTfError, Problem, Unsupported
from tfx_bridge.onnx_tf.registry import REQUIRED, add_fixes, op

__all__ = ["CONVERTER", "ConversionFailed", "Converted", "OnnxTfError", "Problem", "REQUIRED",
           "Unsupported", "add_fixes", "check_model", "convert", "load_for_conversion", "op",
           "save"]
