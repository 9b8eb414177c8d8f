"""Arrow record batches -> serialized tf.Examples, with Arrow kernels and tfx_bsl's encoder.
"""
from __future__ import annotations

from typing import Iterator, List, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tfx_bridge.components.parquet_example_gen.arrow_types import (
    FEATURE_FLOAT,
    FEATURE_INT,
    INT64_MAX,
    MAX_ROWS_SHOWN,
)
from tfx_bridge.components.parquet_example_gen.errors import (
    ParquetDataError,
    ParquetInputError,
)
from tfx_bridge.components.parquet_example_gen.plan import (
    ColumnPlan,
    ReadUnit,
    join_problems,
    open_parquet,
    relative_path,
)


def show_rows(rows: np.ndarray, first_row: int) -> str:
    shown = ", ".join(str(int(r) + first_row) for r in rows[:MAX_ROWS_SHOWN])
    more = f" and {len(rows) - MAX_ROWS_SHOWN} more" if len(rows) > MAX_ROWS_SHOWN else ""
    return f"row {shown}{more}" if len(rows) == 1 else f"rows {shown}{more}"


def _scalar_values(arr: pa.Array, kind: str) -> pa.Array:
    """Casts a flat array to int64 / float32 / binary, bit for bit where kept."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _scalar_values(arr.dictionary_decode(), kind)
    if kind == FEATURE_INT:
        if pa.types.is_date(t) or pa.types.is_time(t):
            # No direct cast to int64: reinterpret the storage (days, ms, us, ns).
            storage = pa.int32() if t.bit_width == 32 else pa.int64()
            return arr.view(storage).cast(pa.int64())
        if pa.types.is_uint64(t):
            # Range was checked by the caller; a safe cast would fail loudly anyway.
            return arr.cast(pa.int64())
        return arr.cast(pa.int64())
    if kind == FEATURE_FLOAT:
        if pa.types.is_float16(t):
            # Arrow 10 has no half->float kernel; numpy widens exactly.
            values = arr.to_numpy(zero_copy_only=False).astype(np.float32)
            return pa.array(values, pa.float32(), mask=np.asarray(arr.is_null()))
        # float64 narrows to float32 (tf.Example has no double): documented;
        # safe=False because an out-of-range double becomes +-inf by design.
        return arr.cast(pa.float32(), safe=False)
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return arr.cast(pa.large_binary())
    return arr.cast(pa.binary())


def _as_list(arr: pa.Array, col: ColumnPlan, path: str, first_row: int,
             problems: List[str]) -> pa.Array:
    """Wraps a column into the list layout the encoder accepts, checking values."""
    if col.is_list:
        values = arr.flatten()
        lengths = pc.list_value_length(arr).fill_null(0)
        nulls = values.null_count
        if nulls:
            parents = np.asarray(pc.list_parent_indices(arr))
            bad = np.unique(parents[np.asarray(values.is_null())])
            problems.append(
                f"Column {col.name!r} in {path} ({show_rows(bad, first_row)}): null inside "
                "a list; tf.Example cannot encode it (it would be written as 0). Fill or drop "
                "nulls upstream.")
            return arr
        value_rows = None
    else:
        values = arr
        lengths = pc.cast(arr.is_valid(), pa.int32())
        value_rows = "scalar"
    if pa.types.is_uint64(values.type) or (
            pa.types.is_dictionary(values.type) and pa.types.is_uint64(values.type.value_type)):
        plain = values.dictionary_decode() if pa.types.is_dictionary(values.type) else values
        over = np.asarray(pc.greater(plain, pa.scalar(INT64_MAX, pa.uint64())).fill_null(False))
        if over.any():
            idx = np.flatnonzero(over)
            rows = idx if value_rows else np.unique(np.asarray(pc.list_parent_indices(arr))[idx])
            first = plain[int(idx[0])].as_py()
            problems.append(
                f"Column {col.name!r} in {path} ({show_rows(rows, first_row)}): uint64 value "
                f"{first} exceeds int64 max {INT64_MAX}; int64_list cannot hold it. Store it as "
                "a string, or split it into two int columns upstream.")
            return arr
    converted = _scalar_values(values, col.feature)
    if value_rows:  # scalars: null -> null list (absent feature), value -> [value]
        converted = converted.drop_null()
    offsets = np.zeros(len(arr) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths), out=offsets[1:])
    mask = arr.is_null() if arr.null_count else None
    if offsets[-1] <= np.iinfo(np.int32).max:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), converted, mask=mask)
    return pa.LargeListArray.from_arrays(pa.array(offsets), converted, mask=mask)


def convert_batch(batch: pa.RecordBatch, columns: Sequence[ColumnPlan], path: str,
                  first_row: int = 0) -> pa.RecordBatch:
    """A source batch as list<int64|float32|binary> columns, ready for the encoder.

    Raises:
      ParquetDataError: every unencodable value in the batch, listed at once
        (column, file, rows).
    """
    problems: List[str] = []
    arrays = []
    for col in columns:
        arrays.append(_as_list(batch.column(col.name), col, path, first_row, problems))
    if problems:
        raise ParquetDataError(join_problems(problems, f"in {path}"))
    return pa.RecordBatch.from_arrays(arrays, [c.name for c in columns])


_ENCODER = None


def _encoder():
    global _ENCODER
    if _ENCODER is None:
        from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder
        _ENCODER = RecordBatchToExamplesEncoder()
    return _ENCODER


def encode_batch(batch: pa.RecordBatch) -> List[bytes]:
    """Serialized tf.Examples, one per row, with null lists left out entirely.

    The C++ encoder writes a null list as an empty ``Feature`` (key present,
    no kind). To make a null truly absent, rows are grouped by which columns
    are null (usually a handful of patterns per batch) and each group is
    encoded without those columns; results go back in row order.
    """
    n = batch.num_rows
    nullable = [i for i, a in enumerate(batch.columns) if a.null_count]
    if not nullable:
        return _encoder().encode(batch)
    null_matrix = np.stack([np.asarray(batch.column(i).is_null()) for i in nullable], axis=1)
    patterns, inverse = np.unique(null_matrix, axis=0, return_inverse=True)
    out = np.empty(n, dtype=object)
    for k, pattern in enumerate(patterns):
        rows = np.flatnonzero(inverse == k)
        drop = {nullable[j] for j in np.flatnonzero(pattern)}
        keep = [i for i in range(batch.num_columns) if i not in drop]
        if not keep:
            out[rows] = b""  # an Example with no features
            continue
        sub = pa.RecordBatch.from_arrays([batch.column(i) for i in keep],
                                         [batch.schema.names[i] for i in keep])
        if len(rows) != n:
            sub = sub.take(pa.array(rows))
        encoded = _encoder().encode(sub)
        holder = np.empty(len(encoded), dtype=object)
        holder[:] = encoded
        out[rows] = holder
    return out.tolist()


def read_batches(unit: ReadUnit, columns: Sequence[str],
                 batch_size: int, base: str = "") -> Iterator[Tuple[int, pa.RecordBatch]]:
    """(first row in file, batch) for one row group, naming the file on failure."""
    first = unit.first_row
    try:
        with open_parquet(unit.path) as f:
            # No pre-buffering: a column chunk is read page by page, not held whole
            # beside its decoded copy (peak memory on huge strings).
            pf = pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 20)
            if unit.num_rows <= batch_size:
                # One batch: read it whole, so the reader's decoded pages are freed
                # before conversion starts (iter_batches keeps them while it iterates,
                # twice the data of a row group holding a huge string).
                table = pf.read_row_group(unit.row_group, columns=list(columns),
                                          use_threads=False)
                batches = table.combine_chunks().to_batches()
                del table
            else:
                batches = pf.iter_batches(batch_size=batch_size, row_groups=[unit.row_group],
                                          columns=list(columns), use_threads=False)
            for batch in batches:
                yield first, batch
                first += batch.num_rows
    except (OSError, pa.ArrowException) as e:
        raise ParquetInputError(
            f"{relative_path(unit.path, base)} (row group {unit.row_group}, rows from {first}): "
            "cannot "
            f"read ({type(e).__name__}: {e}). The file is corrupt or truncated; re-export it."
        ) from e


