"""Typed errors of ParquetExampleGen.

All are raised before any output is kept (a failed run removes its partial
output), name the file and column (and row where there is one), and say the
fix. None of them goes away on retry: the input or the configuration must
change.
"""
from tfx_bridge.errors import BridgeError


class ParquetExampleGenError(BridgeError):
    """Base class of ParquetExampleGen errors."""


class ParquetInputError(ParquetExampleGenError):
    """The input cannot be read: no file matches, a file is truncated or corrupt."""


class ParquetSchemaError(ParquetExampleGenError):
    """A column type tf.Example cannot carry losslessly, or types differ between files."""


class ParquetDataError(ParquetExampleGenError):
    """A value tf.Example cannot carry: a null inside a list, a uint64 above int64 max."""


class ParquetConfigError(ParquetExampleGenError):
    """Bad component or CLI configuration (columns, splits, partition feature)."""
