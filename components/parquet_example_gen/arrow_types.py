"""Arrow types -> tf.Example feature kinds: what ParquetExampleGen carries losslessly.

For a type it refuses, the fix to make upstream.
"""
from __future__ import annotations

from typing import Optional, Tuple

import pyarrow as pa

from tfx_bridge.artifacts import layout

FEATURE_INT = "int64_list"
FEATURE_FLOAT = "float_list"
FEATURE_BYTES = "bytes_list"

# The sidecar at the Examples artifact root (a contract: docs/ARCHITECTURE.md).
SOURCE_SCHEMA_FILE = layout.SOURCE_SCHEMA_FILE
SOURCE_FORMAT = "parquet"
# Stock ExampleGen's file naming, so tools that glob for it keep working.
RECORD_FILE_PREFIX = "data_tfrecord"
RECORD_FILE_SUFFIX = ".gz"
DEFAULT_BATCH_SIZE = 20_000
# How many offending rows an error lists before saying "and N more".
MAX_ROWS_SHOWN = 5

INT64_MAX = 2**63 - 1
_FLATTEN_HINT = {
    "struct": "flatten it upstream (pyarrow Table.flatten() gives one column per field, "
    "e.g. 'col.field') or select the fields you need as columns",
    "map": "split it upstream into two list columns, one of keys and one of values",
    "nested list": "flatten it upstream into one list column (pyarrow.compute.list_flatten) "
    "plus a list<int> column of inner lengths",
    "decimal": "cast it upstream to float64 (lossy), to int64 in a fixed scale (e.g. cents), "
    "or to string",
    "null": "the column holds only nulls (Arrow type null); drop it or give it a type upstream",
}


def _scalar_feature_kind(t: pa.DataType) -> Tuple[Optional[str], Optional[str]]:
    """(feature kind, None) for a carried scalar type, else (None, refusal kind)."""
    if pa.types.is_dictionary(t):
        return _scalar_feature_kind(t.value_type)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return FEATURE_INT, None
    if (pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t)
            or pa.types.is_duration(t)):
        return FEATURE_INT, None
    if pa.types.is_floating(t):
        return FEATURE_FLOAT, None
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)):
        return FEATURE_BYTES, None
    if pa.types.is_decimal(t):
        return None, "decimal"
    if pa.types.is_struct(t):
        return None, "struct"
    if pa.types.is_map(t):
        return None, "map"
    if pa.types.is_null(t):
        return None, "null"
    if is_list_type(t):
        return None, "nested list"
    return None, str(t)


def is_list_type(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)
            or pa.types.is_fixed_size_list(t))


def feature_kind(t: pa.DataType) -> str:
    """The tf.Example feature kind an Arrow type maps to.

    Raises:
      ValueError: the type cannot be carried losslessly; the message says how
        to flatten or cast it upstream.
    """
    inner = t.value_type if is_list_type(t) else t
    kind, refusal = _scalar_feature_kind(inner)
    if kind is None:
        hint = _FLATTEN_HINT.get(refusal, "cast it upstream to a number, string or list of those")
        raise ValueError(f"Arrow type {t} ({refusal}) has no tf.Example encoding; {hint}")
    return kind


