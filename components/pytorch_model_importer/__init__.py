"""PyTorchModelImporter: PyTorch -> ONNX -> SavedModel with a named signature, proven equal.

Exports resolve lazily: the core (``convert``, ``signature``) imports without
TFX, and torch/onnx load only when a model is imported.
"""
import importlib

_EXPORTS = {
    "PyTorchModelImporter": "component",
    "PyTorchModelImporterSpec": "component",
    "ConversionError": "errors",
    "ImporterConfigError": "errors",
    "ImporterError": "errors",
    "ModelSourceError": "errors",
    "NotEquivalent": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
