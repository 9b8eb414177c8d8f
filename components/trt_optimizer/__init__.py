"""TrtOptimizer: TF-TRT where TensorRT exists, a measured CPU path where not.

Exports resolve lazily, so the core (``detect``, ``optimize``) imports without TFX.
"""
from tfx_bridge.lazy import lazy_exports

_EXPORTS = {
    "TrtOptimizer": "component",
    "TrtOptimizerSpec": "spec",
    "OptimizerConfig": "config",
    "Drifted": "errors",
    "OptimizerConfigError": "errors",
    "OptimizerError": "errors",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
