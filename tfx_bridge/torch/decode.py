"""tf.Example records into checked numpy columns, a chunk at a time: what the
PyTorch reader (:mod:`tfx_bridge.torch.examples`) decodes with.

Two ways to frame and parse a file, one set of checks:

- ``defensive`` (files from outside: CLI inputs, hand-overs):
  :mod:`tfx_bridge.artifacts.tfrecord` frames the records (every header and
  record CRC checked before a length is believed, lengths bounded) and tfx_bsl's
  C++ decoder parses them.
- ``tf`` (Examples the pipeline's own components wrote): TF's C++
  ``TFRecordDataset`` frames and ``tf.io.parse_example`` parses, each feature
  as a fixed-length list; the stock StatisticsGen, Transform and Evaluator read
  those same files with the same reader. A chunk TF refuses (a wrong number of
  values, a missing feature, another wire type) is parsed again value by value,
  so the refusal names the record exactly as the defensive route does.

Either way each feature's values pass the same checks: values per record,
integer range for narrower ints, int -> float exactness, no floats into ints,
each refusal naming the file, record, feature and value. No TFX imports.

Example:
    >>> import numpy as np
    >>> cast("x", "int32", np.array([1, 2], np.int64), "f.gz", 0).dtype
    dtype('int32')
"""
from __future__ import annotations

import re
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from tfx_bridge.artifacts import tfrecord
from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs

DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32,
          "int64": np.int64, "int16": np.int16, "uint8": np.uint8, "bool": np.bool_}
READERS = ("defensive", "tf")
# PyTorchTrainer lists here (JSON) the Examples URIs it hands the run_fn: files under
# them were written by the pipeline's components and take TF's reader ("auto").
PIPELINE_EXAMPLES_ENV = "TFX_BRIDGE_PIPELINE_EXAMPLES"

# A chunk: (index of its first record in the file, record count, decode()).
Chunk = Tuple[int, int, Callable[[], Dict[str, np.ndarray]]]


class ExamplesReadError(BridgeError):
    """Examples that cannot become the declared tensors (names feature, file, record)."""


def columns(features: Mapping, found: Mapping[str, Tuple[Optional[np.ndarray], np.ndarray]],
            path: str, first: int, n: int) -> Dict[str, np.ndarray]:
    """``found[name] = (values, values per record)`` -> checked, typed arrays
    (``[n]``, or ``[n, length]`` for a list feature)."""
    out = {}
    for name, feature in features.items():
        values, counts = found.get(name, (None, np.zeros(n, np.int64)))
        bad = np.flatnonzero(counts != feature.length)
        if bad.size:
            raise ExamplesReadError(
                f"{path}, record {first + int(bad[0])}: feature {name!r} has "
                f"{int(counts[bad[0]])} values, expected {feature.length} "
                f"({bad.size} of {n} records in this chunk differ). Fix the "
                "data or the feature's declared length.")
        if values is None:
            values = np.zeros(0, np.float32 if feature.wire == "float32" else np.int64)
        out[name] = cast(name, feature.dtype, values.reshape(-1), path, first,
                         feature.length).reshape(
            (-1, feature.length) if feature.length > 1 else (-1,))
    return out


def cast(name: str, dtype: str, values: np.ndarray, path: str, first: int,
         length: int = 1) -> np.ndarray:
    """``values`` as ``dtype``, refused by name where that would change a value."""
    target = np.dtype(DTYPES[dtype])
    if values.dtype.kind == "f" and target.kind in "iub":
        raise ExamplesReadError(
            f"{path}: feature {name!r} holds floats; declared {dtype}. Declare a "
            "float dtype, or write it as an integer feature.")
    if target.kind in "iub":
        # bool takes 0 and 1 only: a cast would turn 2 into True without a word.
        low, high = (0, 1) if target.kind == "b" else (np.iinfo(target).min,
                                                        np.iinfo(target).max)
        out_of_range = np.flatnonzero((values < low) | (values > high))
        if out_of_range.size:
            at = int(out_of_range[0])
            raise ExamplesReadError(
                f"{path}, record {first + at // length}: feature {name!r} = {int(values[at])} "
                f"does not fit {dtype} [{low}, {high}] ({out_of_range.size} values "
                "in this chunk). Declare int64, or fix the data upstream.")
    out = np.array(values, dtype=target, copy=True)
    if values.dtype.kind in "iu" and target.kind == "f":
        inexact = inexact_ints(values, out)
        if inexact.size:
            at = int(inexact[0])
            raise ExamplesReadError(
                f"{path}, record {first + at // length}: feature {name!r} = "
                f"{int(values[at])} is not exactly a {dtype} (it would become "
                f"{float(out[at])!r}; {inexact.size} such values in this chunk). Declare int64 "
                "(or float64), or fix the data upstream.")
    # A copy in any case: decoders' buffers may be read-only or reused, and training
    # code may write into its batches (torch does not protect a read-only array).
    return out


def inexact_ints(values: np.ndarray, floats: np.ndarray) -> np.ndarray:
    """Indices where an integer changed when cast to ``floats``' dtype. Exact up to
    2**(mantissa bits + 1); above that checked, vectorised while float64 holds the
    integers exactly (2**53), in Python beyond (rare: ids past 9e15)."""
    bits = np.finfo(floats.dtype).nmant + 1
    big = np.flatnonzero((values > 2**bits) | (values < -(2**bits)))  # in integers
    if not big.size:
        return big
    wide = floats[big].astype(np.float64)
    exact64 = (values[big] <= 2**53) & (values[big] >= -(2**53))
    changed = np.zeros(big.size, bool)
    changed[exact64] = wide[exact64] != values[big][exact64].astype(np.float64)
    for i in np.flatnonzero(~exact64):
        changed[i] = int(wide[i]) != int(values[big[i]]) if np.isfinite(wide[i]) else True
    return big[changed]


def _schema_for(features: Mapping):
    """A decoding schema naming only the features read: the decoder skips the rest."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    for name, feature in features.items():
        kind = schema_pb2.FLOAT if feature.wire == "float32" else schema_pb2.INT
        schema.feature.add(name=name, type=kind)
    return schema.SerializeToString()


def defensive_chunks(path: str, features: Mapping, chunk_records: int,
                     max_record_bytes: int, share: Tuple[int, int] = (0, 1)
                     ) -> Iterator[Chunk]:
    """Chunks framed by :mod:`tfx_bridge.artifacts.tfrecord`, decoded by tfx_bsl; with
    ``share`` ``(index, count)``, only the chunks numbered ``index`` modulo ``count``
    (every chunk is framed and checked all the same)."""
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    decoder = ExamplesToRecordBatchDecoder(_schema_for(features))

    def decode(records: List[bytes], first: int) -> Dict[str, np.ndarray]:
        try:
            table = decoder.DecodeBatch(records)
        except Exception as e:  # noqa: BLE001  (the C++ decoder's error names no record)
            raise _types_error(path, first, len(records), str(e)) from e
        found = {}
        for name in features:
            index = table.schema.get_field_index(name)
            if index < 0:
                continue
            column = table.column(index)
            offsets = np.asarray(column.offsets)
            counts = np.diff(offsets)
            if column.null_count:
                counts = np.where(np.asarray(column.is_null()), 0, counts)
            found[name] = (np.asarray(column.values)[offsets[0]:offsets[-1]], counts)
        return columns(features, found, path, first, len(records))

    index, count = share
    for number, batch in enumerate(tfrecord.read_batches(
            path, chunk_records, max_record_bytes=max_record_bytes)):
        if number % count == index:
            yield (batch.first, len(batch.records),
                   lambda b=batch: decode(b.records, b.first))


def _types_error(path: str, first: int, n: int, why: str) -> ExamplesReadError:
    return ExamplesReadError(
        f"{path}, records {first}-{first + n - 1}: not tf.Examples of the declared types "
        f"({why}). Check each feature's wire type (int64 or float32) against the data.")


def _compression(path: str) -> str:
    with fs.open_file(path, "rb") as f:
        return "GZIP" if f.read(2) == b"\x1f\x8b" else ""


def tf_chunks(path: str, features: Mapping, chunk_records: int,
              share: Tuple[int, int] = (0, 1)) -> Iterator[Chunk]:
    """Chunks framed by TF's ``TFRecordDataset`` and parsed by ``parse_example``
    (for the pipeline's own Examples: TF believes record headers); with ``share``
    ``(index, count)``, only the chunks numbered ``index`` modulo ``count``."""
    import tensorflow as tf

    fixed = {name: tf.io.FixedLenFeature(
        [f.length], tf.float32 if f.wire == "float32" else tf.int64)
        for name, f in features.items()}
    ragged = {name: tf.io.RaggedFeature(tf.float32 if f.wire == "float32" else tf.int64,
                                        row_splits_dtype=tf.int64)
              for name, f in features.items()}

    def decode(serialized, first: int) -> Dict[str, np.ndarray]:
        n = int(serialized.shape[0])
        try:
            parsed = tf.io.parse_example(serialized, fixed)
            found = {k: (v.numpy().reshape(-1), np.full(n, features[k].length))
                     for k, v in parsed.items()}
        except tf.errors.InvalidArgumentError:
            # Said per record as the defensive route says it: parsed again value by value.
            try:
                parsed = tf.io.parse_example(serialized, ragged)
            except tf.errors.InvalidArgumentError as e:
                index = re.search(r"Index: (\d+)", e.message)
                at = first + int(index.group(1)) if index else first
                raise _types_error(path, at, n - (at - first), e.message.split("\n")[0]) from e
            found = {k: (v.flat_values.numpy(), v.row_lengths().numpy())
                     for k, v in parsed.items()}
        return columns(features, found, path, first, n)

    index, count = share
    data = tf.data.TFRecordDataset([path], compression_type=_compression(path),
                                   buffer_size=1 << 20).batch(chunk_records).enumerate()
    if count > 1:  # other readers' chunks stay inside TF: framed, never handed over
        data = data.shard(count, index)
    # The next chunk is framed on TF's thread while this one is parsed and checked here.
    data = data.prefetch(1)
    read = 0  # records up to the end of the last chunk received
    iterator = iter(data)
    while True:
        try:
            number, serialized = next(iterator)
        except StopIteration:
            return
        except tf.errors.OpError as e:  # a corrupt or truncated file
            raise ExamplesReadError(
                f"{path}: a corrupt record after record {read} ({e.message.splitlines()[0]})."
                " Re-run the component that wrote it, or read it with reader='defensive' "
                "for the exact record and byte offset.") from e
        first = int(number) * chunk_records  # every chunk but the last is full
        n = int(serialized.shape[0])
        read = first + n
        yield first, n, lambda s=serialized, f=first: decode(s, f)
