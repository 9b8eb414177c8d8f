"""PyTorchModelImporter: PyTorch -> ONNX -> SavedModel with a named signature, proven equal.

Exports resolve lazily: the core (``convert``, ``signature``) imports without
TFX, and torch/onnx load only when a model is imported.
"""
from tfx_bridge.lazy import lazy_exports

_EXPORTS = {
    "PyTorchModelImporter": "component",
    "PyTorchModelImporterSpec": "component",
    "ConversionError": "errors",
    "ImporterConfigError": "errors",
    "ImporterError": "errors",
    "ModelSourceError": "errors",
    "NotEquivalent": "errors",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
