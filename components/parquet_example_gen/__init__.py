"""ParquetExampleGen: Parquet -> lossless tf.Examples through tfx_bsl's C++ encoder.

Exports resolve lazily, so importing the core
(``parquet_to_examples``) or the errors does not import TFX.
"""
from tfx_bridge.lazy import lazy_exports

_EXPORTS = {
    "ParquetExampleGen": "component",
    "ParquetExampleGenSpec": "component",
    "ParquetConfigError": "errors",
    "ParquetDataError": "errors",
    "ParquetExampleGenError": "errors",
    "ParquetInputError": "errors",
    "ParquetSchemaError": "errors",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
