"""Parquet -> tf.Example conversion: the core of ParquetExampleGen.

No TFX imports: this module takes paths and values, so the component's
executor and the ``tfx-bridge ingest`` CLI run exactly the same code, and tests
call it directly.

How it stays fast: files are read as Arrow record batches (one unit of work
per row group), every column is cast with Arrow compute kernels into the
three layouts tfx_bsl's C++ ``RecordBatchToExamplesEncoder`` accepts
(list<int64>, list<float32>, list<binary>), and the encoded records of a
batch travel through Beam as one element, so Beam's per-element cost is paid
per batch, not per row.

How it stays lossless: every kept value is carried bit for bit (0, -0.0, NaN,
+-inf, False, "", b"" and integer extremes included); bytes are never decoded;
a null scalar or null list becomes an absent feature (not an empty one); and
whatever cannot be carried exactly (a null inside a list, which the encoder
would silently write as 0; a uint64 above int64 max; nested or struct
columns) is refused with the file, column and row.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import re
import struct
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io import filebasedsink
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfx_bridge import layout
from tfx_bridge.components.parquet_example_gen.errors import (
    ParquetConfigError,
    ParquetDataError,
    ParquetInputError,
    ParquetSchemaError,
)

_LOG = logging.getLogger(__name__)

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

_INT64_MAX = 2**63 - 1
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


# --------------------------------------------------------------------------- types


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
    if _is_list_type(t):
        return None, "nested list"
    return None, str(t)


def _is_list_type(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)
            or pa.types.is_fixed_size_list(t))


def feature_kind(t: pa.DataType) -> str:
    """The tf.Example feature kind an Arrow type maps to.

    Raises:
      ValueError: the type cannot be carried losslessly; the message says how
        to flatten or cast it upstream.
    """
    inner = t.value_type if _is_list_type(t) else t
    kind, refusal = _scalar_feature_kind(inner)
    if kind is None:
        hint = _FLATTEN_HINT.get(refusal, "cast it upstream to a number, string or list of those")
        raise ValueError(f"Arrow type {t} ({refusal}) has no tf.Example encoding; {hint}")
    return kind


# --------------------------------------------------------------------------- plan


@dataclasses.dataclass(frozen=True)
class ColumnPlan:
    """One source column: its Arrow type at the source and its feature kind."""

    name: str
    arrow_type: str
    feature: str
    is_list: bool


@dataclasses.dataclass(frozen=True)
class ReadUnit:
    """One row group of one file, the unit of parallel work."""

    path: str
    row_group: int
    first_row: int
    num_rows: int
    input_split: str


@dataclasses.dataclass(frozen=True)
class SplitConfig:
    """Where records go, without TFX protos.

    Either ``output_splits`` (name, hash_buckets) partitions the one input
    split by hash buckets like TFX ExampleGen, or each input split is written
    as it is (``output_splits`` empty).
    """

    input_patterns: Tuple[Tuple[str, str], ...]
    output_splits: Tuple[Tuple[str, int], ...] = ()
    partition_feature: Optional[str] = None

    def __post_init__(self):
        if not self.input_patterns:
            raise ParquetConfigError("No input split given; give at least one (name, pattern).")
        if self.output_splits:
            if len(self.input_patterns) != 1:
                raise ParquetConfigError(
                    f"Output splits {[n for n, _ in self.output_splits]} partition one input "
                    f"split, but {len(self.input_patterns)} were given "
                    f"({[n for n, _ in self.input_patterns]}). Give one input split, or drop "
                    "the output split config to keep the input splits.")
            bad = [(n, b) for n, b in self.output_splits if b <= 0]
            if bad:
                raise ParquetConfigError(
                    f"Output splits need positive hash_buckets; got {bad}. Use e.g. "
                    "train:2,eval:1.")
        elif self.partition_feature is not None:
            raise ParquetConfigError(
                f"partition_feature_name {self.partition_feature!r} needs output splits to "
                "partition into; add them or drop the partition feature.")
        names = self.split_names
        if len(set(names)) != len(names) or any(not n for n in names):
            raise ParquetConfigError(f"Split names must be unique and non-empty; got {names}.")

    @property
    def split_names(self) -> List[str]:
        if self.output_splits:
            return [name for name, _ in self.output_splits]
        return [name for name, _ in self.input_patterns]

    @classmethod
    def parse(cls, splits: str, pattern: str,
              partition_feature: Optional[str] = None) -> SplitConfig:
        """From the CLI form ``train:2,eval:1`` over one input pattern."""
        output = []
        for part in splits.split(","):
            name, sep, buckets = part.strip().partition(":")
            if not sep or not buckets.strip().isdigit():
                raise ParquetConfigError(
                    f"Bad split {part!r} in {splits!r}: expected name:buckets, e.g. "
                    "train:2,eval:1.")
            output.append((name.strip(), int(buckets)))
        return cls((("single_split", pattern),), tuple(output), partition_feature)


@dataclasses.dataclass(frozen=True)
class IngestPlan:
    """Everything the conversion needs, checked before any output is written."""

    input_base: str
    columns: Tuple[ColumnPlan, ...]
    units: Tuple[ReadUnit, ...]
    files: Tuple[str, ...]
    splits: SplitConfig
    batch_size: int = DEFAULT_BATCH_SIZE

    @property
    def column_names(self) -> List[str]:
        return [c.name for c in self.columns]

    @property
    def num_rows(self) -> int:
        return sum(u.num_rows for u in self.units)

    def source_schema(self) -> dict:
        """The ``source_schema.json`` contract: column -> Arrow type and feature kind."""
        return {
            "format": SOURCE_FORMAT,
            "columns": {
                c.name: {"arrow_type": c.arrow_type, "feature": c.feature, "list": c.is_list}
                for c in self.columns
            },
            "files": [os.path.relpath(f, self.input_base) if not _is_remote(f) else f
                      for f in self.files],
            "num_rows": self.num_rows,
        }


def _is_remote(path: str) -> bool:
    return "://" in path


def _rel(path: str, base: str) -> str:
    """A short file name for messages: relative to the input base when under it."""
    if not _is_remote(path) and base and not _is_remote(base):
        rel = os.path.relpath(path, base)
        if not rel.startswith(".."):
            return rel
    return path


_PLACEHOLDER = re.compile(r"\{(SPAN|VERSION|YYYY|MM|DD)(:\d+)?\}")


def match_files(input_base: str, pattern: str) -> List[str]:
    """Files matching ``input_base/pattern`` (local, gs://, s3://, hdfs:// via Beam).

    ``{SPAN}``-style placeholders must already be resolved (the component's
    driver does it; the CLI's ingest names one span).
    """
    placeholder = _PLACEHOLDER.search(pattern)
    if placeholder:
        example = _PLACEHOLDER.sub("1", pattern)
        raise ParquetInputError(
            f"Pattern {pattern!r} holds {placeholder.group(0)}: only ParquetExampleGen's "
            "driver resolves span, version and date placeholders (in a pipeline). Here name "
            f"the files themselves, e.g. --pattern {example!r}.")
    full = FileSystems.join(input_base, pattern) if input_base else pattern
    try:
        results = FileSystems.match([full])[0].metadata_list
    except Exception as e:  # Beam raises BeamIOError for unreachable buckets etc.
        raise ParquetInputError(
            f"Cannot list {full!r}: {e}. Check the input base and pattern.") from e
    files = sorted(m.path for m in results if not m.path.endswith("/"))
    if not files and input_base and not FileSystems.exists(input_base):
        # Object-store prefixes need not "exist" as objects: asked only when nothing matched.
        raise ParquetInputError(
            f"Input base {input_base!r} does not exist. Give the folder (or bucket prefix) "
            "that holds the Parquet files.")
    if not files:
        raise ParquetInputError(
            f"No file matches {pattern!r} under {input_base!r}. Check the split pattern: a "
            "glob relative to the input base, e.g. '*.parquet' or 'span-1/*.parquet'.")
    return files


def _open(path: str):
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _read_metadata(path: str, base: str) -> pq.FileMetaData:
    try:
        with _open(path) as f:
            return pq.ParquetFile(f).metadata
    except Exception as e:
        raise ParquetInputError(
            f"{_rel(path, base)}: not a readable Parquet file ({type(e).__name__}: {e}). "
            "It may be truncated or not Parquet; re-export it, or exclude it with the pattern."
        ) from e


def plan_ingest(input_base: str, splits: SplitConfig,
                columns: Optional[Sequence[str]] = None,
                batch_size: int = DEFAULT_BATCH_SIZE) -> IngestPlan:
    """Matches files, reads their footers and checks every column type.

    Collects every problem (unreadable files, unsupported types, type changes
    between files, missing columns) and raises once.

    Raises:
      ParquetInputError: no file matches, or a file is unreadable.
      ParquetSchemaError: unsupported types or types that differ between files.
      ParquetConfigError: unknown columns or a bad partition feature.
    """
    if batch_size <= 0:
        raise ParquetConfigError(f"batch_size must be positive, got {batch_size}.")
    if columns is not None:
        columns = list(columns)
        dupes = sorted({c for c in columns if columns.count(c) > 1})
        if not columns or dupes:
            raise ParquetConfigError(
                f"columns must be a non-empty list of distinct names; got {columns}.")
    files_by_split = [(name, match_files(input_base, pattern))
                      for name, pattern in splits.input_patterns]
    input_errors, schema_errors, config_errors = [], [], []
    first_seen: Dict[str, Tuple[pa.DataType, str]] = {}
    order: List[str] = []
    units: List[ReadUnit] = []
    all_files: List[str] = []
    for split_name, files in files_by_split:
        for path in files:
            all_files.append(path)
            try:
                meta = _read_metadata(path, input_base)
            except ParquetInputError as e:
                input_errors.append(str(e))
                continue
            schema = meta.schema.to_arrow_schema()
            names = schema.names
            if len(set(names)) != len(names):
                dup = sorted({n for n in names if names.count(n) > 1})
                schema_errors.append(
                    f"{_rel(path, input_base)}: duplicate column names {dup}; tf.Example "
                    "features need unique names. Rename them upstream.")
                continue
            wanted = columns if columns is not None else names
            missing = [c for c in wanted if c not in names]
            if missing:
                config_errors.append(
                    f"{_rel(path, input_base)}: no column {', '.join(map(repr, missing))}; "
                    f"it has {names}. Fix --columns / the columns parameter, or the file.")
            for name in wanted:
                if name not in names:
                    continue
                t = schema.field(name).type
                if name not in first_seen:
                    first_seen[name] = (t, path)
                    order.append(name)
                elif not first_seen[name][0].equals(t):
                    t0, p0 = first_seen[name]
                    schema_errors.append(
                        f"Column {name!r}: {t0} in {_rel(p0, input_base)} but {t} in "
                        f"{_rel(path, input_base)}; one Examples artifact needs one type per "
                        "feature. Cast upstream so every file agrees.")
            if columns is None:
                extra = [n for n in order if n not in names]
                if extra:
                    schema_errors.append(
                        f"{_rel(path, input_base)}: lacks column(s) {extra} that other files "
                        "have. Write every file with the same columns, or select the common "
                        "ones with --columns.")
            first_row = 0
            for rg in range(meta.num_row_groups):
                n = meta.row_group(rg).num_rows
                if n:
                    units.append(ReadUnit(path, rg, first_row, n, split_name))
                first_row += n
    plans = []
    for name in order:
        t, path = first_seen[name]
        try:
            kind = feature_kind(t)
        except ValueError as e:
            schema_errors.append(f"Column {name!r} in {_rel(path, input_base)}: {e}.")
            continue
        plans.append(ColumnPlan(name, str(t), kind, _is_list_type(t)))
    if splits.partition_feature is not None:
        pf = splits.partition_feature
        match = [p for p in plans if p.name == pf]
        if not match and pf not in first_seen:
            config_errors.append(
                f"partition_feature_name {pf!r} is not a column being ingested; columns: "
                f"{order}.")
        elif match and match[0].feature == FEATURE_FLOAT:
            config_errors.append(
                f"partition_feature_name {pf!r} is {match[0].arrow_type} (float_list); "
                "partition on an integer or string column, as TFX requires.")
    problems = input_errors + schema_errors + config_errors
    if problems:
        cls = (ParquetInputError if input_errors else
               ParquetSchemaError if schema_errors else ParquetConfigError)
        raise cls(_join_problems(problems, f"under {input_base!r}"))
    return IngestPlan(input_base, tuple(plans), tuple(units), tuple(all_files), splits,
                      batch_size)


def _join_problems(problems: List[str], where: str) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems {where}:\n" + "\n".join(f"- {p}" for p in problems)


# --------------------------------------------------------------------------- convert


def _show_rows(rows: np.ndarray, first_row: int) -> str:
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
                f"Column {col.name!r} in {path} ({_show_rows(bad, first_row)}): null inside "
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
        over = np.asarray(pc.greater(plain, pa.scalar(_INT64_MAX, pa.uint64())).fill_null(False))
        if over.any():
            idx = np.flatnonzero(over)
            rows = idx if value_rows else np.unique(np.asarray(pc.list_parent_indices(arr))[idx])
            first = plain[int(idx[0])].as_py()
            problems.append(
                f"Column {col.name!r} in {path} ({_show_rows(rows, first_row)}): uint64 value "
                f"{first} exceeds int64 max {_INT64_MAX}; int64_list cannot hold it. Store it as "
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
        raise ParquetDataError(_join_problems(problems, f"in {path}"))
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
        with _open(unit.path) as f:
            pf = pq.ParquetFile(f)
            for batch in pf.iter_batches(batch_size=batch_size, row_groups=[unit.row_group],
                                         columns=list(columns), use_threads=False):
                yield first, batch
                first += batch.num_rows
    except (OSError, pa.ArrowException) as e:
        raise ParquetInputError(
            f"{_rel(unit.path, base)} (row group {unit.row_group}, rows from {first}): cannot "
            f"read ({type(e).__name__}: {e}). The file is corrupt or truncated; re-export it."
        ) from e


# --------------------------------------------------------------------------- split hash
#
# TFX ExampleGen buckets a record by sha256 of its deterministic serialization.
# tfx_bsl's encoder serializes the feature map in an order that changes from
# process to process, so hashing its bytes would move records between splits
# from run to run. Instead each row is hashed from its values, column by column
# in name order, with numpy over whole batches: deterministic across runs and
# machines, and the same row always lands in the same split.

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer (uint64 arithmetic wraps, as intended)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of ``values[offsets[i]:offsets[i+1]]`` for each i (0 for empty)."""
    lengths = np.diff(offsets)
    out = np.zeros(len(lengths), dtype=np.uint64)
    nonempty = lengths > 0
    if nonempty.any():
        # reduceat runs to the next given index: empty rows in between add nothing.
        out[nonempty] = np.add.reduceat(values, offsets[:-1][nonempty])
    return out


def _positional(hashes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Makes each element's hash depend on its position within its segment."""
    lengths = np.diff(offsets)
    pos = np.arange(len(hashes), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    return _mix64(hashes ^ (pos.astype(np.uint64) * _GOLDEN))


def _raw_offsets(arr: pa.Array) -> np.ndarray:
    """The n+1 offsets of a (large) list or binary array, as stored (int64)."""
    large = pa.types.is_large_list(arr.type) or pa.types.is_large_binary(arr.type)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.int64 if large else np.int32)
    return raw[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def _value_hashes(values: pa.Array) -> np.ndarray:
    """One uint64 per int64 / float32 (by bits) / binary value."""
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        stored = _raw_offsets(values)
        data = values.buffers()[2]
        raw = (np.frombuffer(data, dtype=np.uint8)[stored[0]:stored[-1]]
               if data is not None else np.zeros(0, np.uint8))
        offsets = stored - stored[0]
        per_byte = _positional(_mix64(raw.astype(np.uint64) + _GOLDEN), offsets)
        return _mix64(_segment_sums(per_byte, offsets) + np.diff(offsets).astype(np.uint64))
    numbers = values.to_numpy(zero_copy_only=False)
    bits = numbers.view(np.uint32 if numbers.dtype == np.float32 else np.uint64)
    return _mix64(bits.astype(np.uint64) + _GOLDEN)


def _name_seed(name: str) -> np.uint64:
    return _U64(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))


def row_hashes(batch: pa.RecordBatch, columns: Sequence[str]) -> np.ndarray:
    """A deterministic uint64 per row of a converted batch, from ``columns``' values.

    Null and empty lists hash differently; so do ``["ab"]`` and ``["a", "b"]``.
    """
    h = np.full(batch.num_rows, _U64(0x243F6A8885A308D3), dtype=np.uint64)
    for name in sorted(columns):
        arr = batch.column(name)
        stored = _raw_offsets(arr)
        values = arr.values.slice(int(stored[0]), int(stored[-1] - stored[0]))
        offsets = stored - stored[0]
        per_value = _positional(_value_hashes(values), offsets)
        col = _segment_sums(per_value, offsets)
        col = col + np.diff(offsets).astype(np.uint64) * _GOLDEN
        col = col ^ (np.asarray(arr.is_null(), dtype=np.uint64) * _U64(0xD6E8FEB86659FD93))
        h = _mix64(h * _GOLDEN + _mix64(col ^ _name_seed(name)))
    return h


def bucket_of(hashes: np.ndarray, total_buckets: int) -> np.ndarray:
    """Hash bucket in [0, total_buckets) for each row hash."""
    return (hashes % _U64(total_buckets)).astype(np.int64)


def convert_unit(unit: ReadUnit, plan: IngestPlan) -> Iterator[Tuple[str, List[bytes]]]:
    """(split name, serialized tf.Examples) for each batch of one row group."""
    splits = plan.splits
    names = plan.column_names
    pcol = next((c for c in plan.columns if c.name == splits.partition_feature), None)
    bounds = np.cumsum([b for _, b in splits.output_splits]) if splits.output_splits else None
    shown = _rel(unit.path, plan.input_base)
    for first_row, batch in read_batches(unit, names, plan.batch_size, plan.input_base):
        converted = convert_batch(batch, plan.columns, shown, first_row)
        records = encode_batch(converted)
        if bounds is None:
            yield unit.input_split, records
            continue
        if pcol is not None:
            key_col = converted.column(names.index(pcol.name))
            missing = np.flatnonzero(np.asarray(key_col.is_null()))
            if len(missing):
                raise ParquetDataError(
                    f"Column {pcol.name!r} in {shown} ({_show_rows(missing, first_row)}): null "
                    "in the partition feature, so the row has no split. Fill it upstream or "
                    "partition on another column.")
            hashes = row_hashes(converted, [pcol.name])
        else:
            hashes = row_hashes(converted, names)
        split_index = np.searchsorted(bounds, bucket_of(hashes, int(bounds[-1])), side="right")
        as_objects = np.empty(len(records), dtype=object)
        as_objects[:] = records
        for i, (name, _) in enumerate(splits.output_splits):
            chosen = np.flatnonzero(split_index == i)
            if len(chosen):
                yield name, as_objects[chosen].tolist()


# --------------------------------------------------------------------------- write


def _crc32c_fn():
    try:
        import google_crc32c  # C implementation, a Beam[gcp] dependency
        return google_crc32c.value
    except ImportError:  # pragma: no cover - depends on the environment
        import crcmod.predefined
        return crcmod.predefined.mkPredefinedCrcFun("crc-32c")


_CRC32C = _crc32c_fn()


def _masked_crc(data: bytes) -> bytes:
    crc = _CRC32C(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


_HEADERS: Dict[int, bytes] = {}


def _header(length: int) -> bytes:
    """Length + its masked crc; record lengths repeat, so these are cached."""
    header = _HEADERS.get(length)
    if header is None:
        packed = struct.pack("<Q", length)
        header = packed + _masked_crc(packed)
        if len(_HEADERS) < 1 << 16:
            _HEADERS[length] = header
    return header


def tfrecord_frames(records: Sequence[bytes]) -> bytes:
    """TFRecord framing of many records as one buffer (one write call).

    Each record is ``len | masked_crc(len) | data | masked_crc(data)``; the
    crcs are computed in C per record and masked with numpy for the batch.
    """
    n = len(records)
    crcs = np.fromiter(map(_CRC32C, records), dtype=np.uint32, count=n)
    masked = (((crcs >> np.uint32(15)) | (crcs << np.uint32(17))) + np.uint32(0xA282EAD8))
    trailer = masked.astype("<u4").tobytes()
    headers = [_header(len(r)) for r in records]
    trailers = [trailer[i:i + 4] for i in range(0, 4 * n, 4)]
    return b"".join(itertools.chain.from_iterable(zip(headers, records, trailers, strict=True)))


class _BatchedTFRecordSink(filebasedsink.FileBasedSink):
    """A gzip TFRecord sink whose elements are lists of serialized records."""

    def __init__(self, file_path_prefix: str):
        super().__init__(file_path_prefix=file_path_prefix,
                         coder=beam.coders.PickleCoder(),
                         file_name_suffix=RECORD_FILE_SUFFIX,
                         num_shards=0, shard_name_template=None,
                         mime_type="application/octet-stream",
                         compression_type=CompressionTypes.GZIP)

    def write_record(self, file_handle, value: List[bytes]):
        file_handle.write(tfrecord_frames(value))


METRICS_NAMESPACE = "tfx_bridge.parquet_example_gen"


class _ConvertUnit(beam.DoFn):
    def __init__(self, plan: IngestPlan):
        self._plan = plan
        self._records = {name: beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"records[{name}]")
                         for name in plan.splits.split_names}

    def process(self, unit: ReadUnit):
        count = 0
        for split, records in convert_unit(unit, self._plan):
            count += len(records)
            self._records[split].inc(len(records))
            yield beam.pvalue.TaggedOutput(split, records)
        _LOG.info("Converted %d rows from %s (row group %d).", count,
                  _rel(unit.path, self._plan.input_base), unit.row_group)


def split_dir(output_uri: str, split: str) -> str:
    """The standard Examples split folder, ``<uri>/Split-<name>``."""
    return os.path.join(output_uri, f"Split-{split}")


def expand_ingest(pipeline: beam.Pipeline, plan: IngestPlan,
                  split_uris: Dict[str, str]) -> None:
    """Adds read -> convert -> partition -> write to a Beam pipeline.

    ``split_uris`` maps each split name to its output folder.
    """
    names = plan.splits.split_names
    converted = (
        pipeline
        | "ListRowGroups" >> beam.Create(list(plan.units))
        | "Distribute" >> beam.Reshuffle()
        | "ArrowToExamples" >> beam.ParDo(_ConvertUnit(plan)).with_outputs(*names))
    for name in names:
        _ = (converted[name]
             | f"Write[{name}]" >> beam.io.Write(_BatchedTFRecordSink(
                 os.path.join(split_uris[name], RECORD_FILE_PREFIX))))


def ingest(plan: IngestPlan, output_uri: str, make_pipeline) -> Dict[str, int]:
    """Runs the conversion into ``output_uri``/Split-*/ and writes the sidecar.

    ``make_pipeline`` returns a fresh ``beam.Pipeline`` (the executor's, with
    its beam_pipeline_args, or a DirectRunner one from the CLI). On failure the
    partial split folders are removed and our typed error is raised with its
    own message, not Beam's wrapping of it.

    Returns:
      Records written per split.
    """
    split_uris = {name: split_dir(output_uri, name) for name in plan.splits.split_names}
    try:
        pipeline = make_pipeline()
        expand_ingest(pipeline, plan, split_uris)
        result = pipeline.run()
        result.wait_until_finish()
    except Exception as e:
        remove_outputs(split_uris)
        ours = _typed_error_in(e)
        if ours is None:
            raise
        raise type(ours)(_strip_beam_context(str(ours))) from e
    write_source_schema(output_uri, plan)
    counters = result.metrics().query(
        beam.metrics.MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    written = {c.key.metric.name: (c.committed if c.committed is not None else c.attempted)
               for c in counters}
    return {name: int(written.get(f"records[{name}]", 0)) for name in split_uris}


def _typed_error_in(exc: BaseException) -> Optional[BaseException]:
    """Our typed error inside whatever Beam wrapped it in, if any."""
    from tfx_bridge.errors import BridgeError
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, BridgeError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _strip_beam_context(message: str) -> str:
    """Beam appends " [while running 'Step']" to re-raised errors; users need not see it."""
    return message.split(" [while running", 1)[0].strip()


def write_source_schema(output_uri: str, plan: IngestPlan) -> str:
    path = os.path.join(output_uri, SOURCE_SCHEMA_FILE)
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(json.dumps(plan.source_schema(), indent=2, sort_keys=True).encode())
    return path


def remove_outputs(split_uris: Dict[str, str]) -> None:
    """Deletes partial split folders after a failed run, so nothing half-written stays."""
    for uri in split_uris.values():
        if FileSystems.exists(uri):
            try:
                FileSystems.delete([uri])
            except Exception:  # best effort: the original error matters more
                _LOG.warning("Could not remove partial output %s", uri, exc_info=True)


def count_records(split_uri: str) -> int:
    """Records in a split folder (reads the files; for summaries and tests)."""
    total = 0
    pattern = FileSystems.join(split_uri, f"{RECORD_FILE_PREFIX}*{RECORD_FILE_SUFFIX}")
    for m in FileSystems.match([pattern])[0].metadata_list:
        with FileSystems.open(m.path, compression_type=CompressionTypes.GZIP) as f:
            data = b"".join(iter(lambda: f.read(1 << 20), b""))
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            pos += 12 + length + 4
            total += 1
    return total


__all__ = [
    "ColumnPlan", "IngestPlan", "ReadUnit", "SplitConfig", "convert_batch", "encode_batch",
    "expand_ingest", "feature_kind", "ingest", "plan_ingest", "write_source_schema",
]
