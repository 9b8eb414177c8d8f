"""TrtOptimizer: TF-TRT where TensorRT exists, a measured CPU path where not.

Exports resolve lazily, so the core (``detect``, ``optimize``) imports without TFX.
"""
import importlib

_EXPORTS = {
    "TrtOptimizer": "component",
    "TrtOptimizerSpec": "component",
    "Drifted": "errors",
    "OptimizerConfigError": "errors",
    "OptimizerError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
