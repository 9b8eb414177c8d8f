"""Planning an ingest: matched files, row groups (units of work), column plans, splits.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfx_bridge.components.parquet_example_gen.arrow_types import (
    DEFAULT_BATCH_SIZE,
    FEATURE_FLOAT,
    SOURCE_FORMAT,
    feature_kind,
    is_list_type,
)
from tfx_bridge.components.parquet_example_gen.errors import (
    ParquetConfigError,
    ParquetInputError,
    ParquetSchemaError,
)
from tfx_bridge.storage import fs
from tfx_bridge.storage.names import check_segment


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
        for name in names:  # each becomes a Split-<name> folder under the output
            check_segment(name, "Split name")
        if len(set(names)) != len(names):
            raise ParquetConfigError(f"Split names must be unique; got {names}.")

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
            "files": [os.path.relpath(f, self.input_base) if not fs.is_remote(f) else f
                      for f in self.files],
            "num_rows": self.num_rows,
        }


def relative_path(path: str, base: str) -> str:
    """A short file name for messages: relative to the input base when under it."""
    if not fs.is_remote(path) and base and not fs.is_remote(base):
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
    special = [f for f in files if not fs.is_remote(f) and not _is_regular(f)]
    if special:
        # A FIFO would block the footer read forever; a device could stream without end.
        raise ParquetInputError(
            f"Not regular files: {[relative_path(f, input_base) for f in special]} (a FIFO, "
            f"socket or device matched {pattern!r}). Give Parquet files, or narrow the pattern.")
    return files


def _is_regular(path: str) -> bool:
    """A local path is a regular file (following links): the one local-only check."""
    import stat

    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def open_parquet(path: str):
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _read_metadata(path: str, base: str) -> pq.FileMetaData:
    try:
        with open_parquet(path) as f:
            return pq.ParquetFile(f).metadata
    except Exception as e:
        raise ParquetInputError(
            f"{relative_path(path, base)}: not a readable Parquet file ({type(e).__name__}: {e}). "
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
                    f"{relative_path(path, input_base)}: duplicate column names {dup}; tf.Example "
                    "features need unique names. Rename them upstream.")
                continue
            wanted = columns if columns is not None else names
            missing = [c for c in wanted if c not in names]
            if missing:
                config_errors.append(
                    f"{relative_path(path, input_base)}: no column "
                    f"{', '.join(map(repr, missing))}; "
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
                        f"Column {name!r}: {t0} in {relative_path(p0, input_base)} but {t} in "
                        f"{relative_path(path, input_base)}; one Examples artifact needs one "
                        "type per "
                        "feature. Cast upstream so every file agrees.")
            if columns is None:
                extra = [n for n in order if n not in names]
                if extra:
                    schema_errors.append(
                        f"{relative_path(path, input_base)}: lacks column(s) {extra} that other "
                        "files "
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
            schema_errors.append(f"Column {name!r} in {relative_path(path, input_base)}: {e}.")
            continue
        plans.append(ColumnPlan(name, str(t), kind, is_list_type(t)))
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
        raise cls(join_problems(problems, f"under {input_base!r}"))
    return IngestPlan(input_base, tuple(plans), tuple(units), tuple(all_files), splits,
                      batch_size)


def join_problems(problems: List[str], where: str) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems {where}:\n" + "\n".join(f"- {p}" for p in problems)


