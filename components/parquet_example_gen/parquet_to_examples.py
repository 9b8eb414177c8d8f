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

The pieces: ``arrow_types`` (the type table), ``plan`` (files, row groups,
splits), ``arrow_convert`` (batches -> tf.Examples), ``split_hash`` (split
assignment), ``tfrecord_writer`` (framing and the sink); this module runs them
as one Beam pipeline and cleans up after a failed run.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Dict, Iterator, List, Optional, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfx_bridge.artifacts import tfrecord
from tfx_bridge.components.parquet_example_gen.arrow_convert import (
    convert_batch,
    encode_batch,
    read_batches,
    show_rows,
)
from tfx_bridge.components.parquet_example_gen.arrow_types import (
    RECORD_FILE_PREFIX,
    RECORD_FILE_SUFFIX,
    SOURCE_SCHEMA_FILE,
    feature_kind,
)
from tfx_bridge.components.parquet_example_gen.errors import (
    ParquetDataError,
)
from tfx_bridge.components.parquet_example_gen.plan import (
    ColumnPlan,
    IngestPlan,
    ReadUnit,
    SplitConfig,
    plan_ingest,
    relative_path,
)
from tfx_bridge.components.parquet_example_gen.split_hash import (
    bucket_of,
    row_hashes,
)
from tfx_bridge.components.parquet_example_gen.tfrecord_writer import BatchedTFRecordSink
from tfx_bridge.storage import fs
from tfx_bridge.storage.names import child

_LOG = logging.getLogger(__name__)


def convert_unit(unit: ReadUnit, plan: IngestPlan) -> Iterator[Tuple[str, List[bytes]]]:
    """(split name, serialized tf.Examples) for each batch of one row group."""
    splits = plan.splits
    names = plan.column_names
    pcol = next((c for c in plan.columns if c.name == splits.partition_feature), None)
    bounds = np.cumsum([b for _, b in splits.output_splits]) if splits.output_splits else None
    shown = relative_path(unit.path, plan.input_base)
    for first_row, batch in read_batches(unit, names, plan.batch_size, plan.input_base):
        converted = convert_batch(batch, plan.columns, shown, first_row)
        del batch
        if bounds is None:
            yield unit.input_split, encode_batch(converted)
            continue
        if pcol is not None:
            key_col = converted.column(names.index(pcol.name))
            missing = np.flatnonzero(np.asarray(key_col.is_null()))
            if len(missing):
                raise ParquetDataError(
                    f"Column {pcol.name!r} in {shown} ({show_rows(missing, first_row)}): null "
                    "in the partition feature, so the row has no split. Fill it upstream or "
                    "partition on another column.")
            hashes = row_hashes(converted, [pcol.name])
        else:
            hashes = row_hashes(converted, names)
        # Hashed before encoding, so the hash's temporaries and the records
        # are not held at once.
        split_index = np.searchsorted(bounds, bucket_of(hashes, int(bounds[-1])), side="right")
        records = encode_batch(converted)
        del converted
        as_objects = np.empty(len(records), dtype=object)
        as_objects[:] = records
        del records
        for i, (name, _) in enumerate(splits.output_splits):
            chosen = np.flatnonzero(split_index == i)
            if len(chosen):
                yield name, as_objects[chosen].tolist()


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
                  relative_path(unit.path, self._plan.input_base), unit.row_group)


def split_dir(output_uri: str, split: str) -> str:
    """The standard Examples split folder, ``<uri>/Split-<name>``."""
    return child(output_uri, f"Split-{split}")


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
             | f"Write[{name}]" >> beam.io.Write(BatchedTFRecordSink(
                 os.path.join(split_uris[name], RECORD_FILE_PREFIX))))


def ingest(plan: IngestPlan, output_uri: str, make_pipeline,
           allow_empty_splits: bool = False) -> Dict[str, int]:
    """Runs the conversion into ``output_uri``/Split-*/ and writes the sidecar.

    ``make_pipeline`` returns a fresh ``beam.Pipeline`` (the executor's, with
    its beam_pipeline_args, or a DirectRunner one from the CLI). On failure the
    partial split folders are removed and our typed error is raised with its
    own message, not Beam's wrapping of it. A split that got no records (the
    span has 0 rows, or too few to reach every hash bucket) is refused the same
    way unless ``allow_empty_splits``.

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
    counters = result.metrics().query(
        beam.metrics.MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    written = {c.key.metric.name: (c.committed if c.committed is not None else c.attempted)
               for c in counters}
    counts = {name: int(written.get(f"records[{name}]", 0)) for name in split_uris}
    empty = [name for name, n in counts.items() if n == 0]
    if empty and not allow_empty_splits:
        remove_outputs(split_uris)
        raise ParquetDataError(_empty_splits_message(plan, counts, empty))
    write_source_schema(output_uri, plan)
    return counts


def _empty_splits_message(plan: IngestPlan, counts: Dict[str, int], empty: List[str]) -> str:
    where = f"{plan.input_base} ({len(plan.files)} file(s), {plan.num_rows} rows)"
    if plan.num_rows == 0:
        how, fix = "it holds no rows", "Add rows to the span (or remove it)"
    elif plan.splits.output_splits:
        buckets = ",".join(f"{n}:{b}" for n, b in plan.splits.output_splits)
        how = (f"after hashing into {buckets}: "
               + ", ".join(f"{n} got {counts[n]}" for n in counts))
        fix = ("Add rows to the span, or change the hash buckets (or the partition "
               "feature) so that every split gets records")
    else:
        how = "matched no rows"
        fix = "Add rows to those splits' files"
    return (f"Split(s) {empty} of {where} would be empty: {how}. Transform, the trainer "
            f"and the Evaluator cannot work on an empty split. {fix}; or allow empty "
            "splits (allow_empty_splits=True, --allow-empty-splits) where nothing "
            "downstream reads them.")


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
    """Records in a split folder (reads the files, in bounded batches, with
    tfx_bridge.artifacts.tfrecord's checks; for summaries and tests)."""
    pattern = fs.join(split_uri, f"{RECORD_FILE_PREFIX}*{RECORD_FILE_SUFFIX}")
    return sum(len(batch.records) for path in fs.glob(pattern)
               for batch in tfrecord.read_batches(path))


__all__ = [
    "ColumnPlan", "IngestPlan", "ReadUnit", "SplitConfig", "convert_batch", "encode_batch",
    "expand_ingest", "feature_kind", "ingest", "plan_ingest", "write_source_schema",
]
