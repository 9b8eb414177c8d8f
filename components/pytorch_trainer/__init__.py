"""PyTorchTrainer: the stock TFX Trainer with an executor that trains PyTorch.

Exports resolve lazily, so the helpers a ``run_fn`` uses import without TFX.
"""
from tfx_bridge.lazy import lazy_exports

_EXPORTS = {
    "PyTorchTrainer": "component",
    "TrainerOutputError": "errors",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
