"""tfx-bridge TFX components.

``from tfx_bridge.components import ParquetExampleGen`` imports TFX; the
cores (e.g. ``tfx_bridge.components.parquet_example_gen.parquet_to_examples``)
are importable without it. Exports resolve lazily for that reason.
"""
from tfx_bridge.lazy import lazy_exports

_EXPORTS = {
    "ParquetExampleGen": "tfx_bridge.components.parquet_example_gen",
    "SchemaGuard": "tfx_bridge.components.schema_guard",
    "PyTorchModelImporter": "tfx_bridge.components.pytorch_model_importer",
    "PyTorchTrainer": "tfx_bridge.components.pytorch_trainer",
    "TrtOptimizer": "tfx_bridge.components.trt_optimizer",
    "ServingPusher": "tfx_bridge.components.serving_pusher",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
