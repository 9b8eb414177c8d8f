"""ParquetExampleGen: Parquet -> lossless tf.Examples through tfx_bsl's C++ encoder.

Exports resolve lazily, so importing the core
(``parquet_to_examples``) or the errors does not import TFX.
"""
import importlib

_EXPORTS = {
    "ParquetExampleGen": "component",
    "ParquetExampleGenSpec": "component",
    "ParquetConfigError": "errors",
    "ParquetDataError": "errors",
    "ParquetExampleGenError": "errors",
    "ParquetInputError": "errors",
    "ParquetSchemaError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
