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

from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from tfx_bridge.artifacts import tfrecord
from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs
from tfx_bridge.torch.forks import forked_after_tf

DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32,
          "int64": np.int64, "int16": np.int16, "uint8": np.uint8, "bool": np.bool_}
READERS = ("defensive", "tf")
# PyTorchTrainer lists here (JSON) the Examples URIs it hands the run_fn: files under
# them were written by the pipeline's components and take TF's reader ("auto").
PIPELINE_EXAMPLES_ENV = "TFX_BRIDGE_PIPELINE_EXAMPLES"
# TF's reader frames and parses this many records at a time (then joins them into
# chunks): a part and its parsed values stay in cache from one step to the next,
# where whole 8192-record chunks of 1 KB records took 1.5x the time.
PART_RECORDS = 1024

# A chunk: (index of its first record in the file, record count, decode()).
Chunk = Tuple[int, int, Callable[[], Dict[str, np.ndarray]]]


class ExamplesReadError(BridgeError):
    """Examples that cannot become the declared tensors (names feature, file, record)."""


def reader_for(asked: str, chosen: str) -> str:
    """The reader to use here: ``chosen`` (what ``asked``, maybe ``"auto"``, became),
    unless this process was forked after TensorFlow ran. Then ``"auto"`` reads with
    the defensive reader (the same records, the same checks, no TF); ``"tf"`` asked
    by name is refused at once, naming the fix: never a hang."""
    if chosen != "tf" or not forked_after_tf():
        return chosen
    if asked == "auto":
        return "defensive"
    raise ExamplesReadError(
        "reader='tf' in a process forked after TensorFlow ran in its parent (a DataLoader "
        "worker started by fork): TensorFlow's threads do not survive a fork, so its "
        "reader would wait forever. Give the DataLoader multiprocessing_context='spawn', "
        "or use reader='auto' or 'defensive' there.")


def columns(features: Mapping,
            found: Mapping[str, Tuple[Optional[np.ndarray], Optional[np.ndarray]]],
            path: str, first: int, n: int, owned: bool = False) -> Dict[str, np.ndarray]:
    """``found[name] = (values, values per record)`` -> checked, typed arrays
    (``[n]``, or ``[n, length]`` for a list feature). Values per record ``None``:
    the parser already gave every record ``length`` values. ``owned``: the values
    are arrays no one else holds, so those already of the declared dtype are kept
    rather than copied."""
    out = {}
    for name, feature in features.items():
        values, counts = found.get(name, (None, np.zeros(n, np.int64)))
        bad = np.flatnonzero(counts != feature.length) if counts is not None else ()
        if len(bad):
            raise ExamplesReadError(
                f"{path}, record {first + int(bad[0])}: feature {name!r} has "
                f"{int(counts[bad[0]])} values, expected {feature.length} "
                f"({len(bad)} of {n} records in this chunk differ). Fix the "
                "data or the feature's declared length.")
        if values is None:
            values = np.zeros(0, np.float32 if feature.wire == "float32" else np.int64)
        out[name] = cast(name, feature.dtype, values.reshape(-1), path, first,
                         feature.length, owned).reshape(
            (-1, feature.length) if feature.length > 1 else (-1,))
    return out


def cast(name: str, dtype: str, values: np.ndarray, path: str, first: int,
         length: int = 1, owned: bool = False) -> np.ndarray:
    """``values`` as ``dtype``, refused by name where that would change a value."""
    target = np.dtype(DTYPES[dtype])
    if values.dtype.kind == "f" and target.kind in "iub":
        raise ExamplesReadError(
            f"{path}: feature {name!r} holds floats; declared {dtype}. Declare a "
            "float dtype, or write it as an integer feature.")
    if target.kind in "iub" and values.size:
        # bool takes 0 and 1 only: a cast would turn 2 into True without a word.
        low, high = (0, 1) if target.kind == "b" else (np.iinfo(target).min,
                                                        np.iinfo(target).max)
        # Two reductions over the chunk; the offending indices only when one is out.
        if values.min() < low or values.max() > high:
            out_of_range = np.flatnonzero((values < low) | (values > high))
            at = int(out_of_range[0])
            raise ExamplesReadError(
                f"{path}, record {first + at // length}: feature {name!r} = {int(values[at])} "
                f"does not fit {dtype} [{low}, {high}] ({out_of_range.size} values "
                "in this chunk). Declare int64, or fix the data upstream.")
    # Otherwise a copy: decoders' buffers may be read-only or reused, and training
    # code may write into its batches (torch does not protect a read-only array).
    out = values.astype(target, copy=not (owned and values.flags.writeable))
    if values.dtype.kind in "iu" and target.kind == "f":
        inexact = inexact_ints(values, out)
        if inexact.size:
            at = int(inexact[0])
            raise ExamplesReadError(
                f"{path}, record {first + at // length}: feature {name!r} = "
                f"{int(values[at])} is not exactly a {dtype} (it would become "
                f"{float(out[at])!r}; {inexact.size} such values in this chunk). Declare int64 "
                "(or float64), or fix the data upstream.")
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
            raise _undecodable(path, features, records, first, str(e)) from e
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


def _undecodable(path: str, features: Mapping, records: List[bytes], first: int,
                 why: str) -> ExamplesReadError:
    """The refusal for a batch the decoder refused as a whole: its first record
    the decoder refuses alone, named with the decoder's words for it (the same
    whichever reader framed the batch)."""
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    decoder = ExamplesToRecordBatchDecoder(_schema_for(features))
    for at, record in enumerate(records):
        try:
            decoder.DecodeBatch([record])
        except Exception as e:  # noqa: BLE001  (the C++ decoder's error, as above)
            return _types_error(path, first + at, 1, str(e))
    return _types_error(path, first, len(records), why)


def _types_error(path: str, first: int, n: int, why: str) -> ExamplesReadError:
    where = f"record {first}: not a tf.Example" if n == 1 else \
        f"records {first}-{first + n - 1}: not tf.Examples"
    return ExamplesReadError(
        f"{path}, {where} of the declared types ({why.strip().splitlines()[0]}). "
        "Check each feature's wire type (int64 or float32) against the data.")


def _compression(path: str) -> str:
    with fs.open_file(path, "rb") as f:
        return "GZIP" if f.read(2) == b"\x1f\x8b" else ""


def tf_chunks(path: str, features: Mapping, chunk_records: int,
              share: Tuple[int, int] = (0, 1)) -> Iterator[Chunk]:
    """Chunks framed by TF's ``TFRecordDataset`` and parsed by ``parse_example``
    (for the pipeline's own Examples: TF believes record headers); with ``share``
    ``(index, count)``, only the chunks numbered ``index`` modulo ``count``.

    Framing and parsing run on TF's threads, ahead of the caller, in parts of at
    most ``PART_RECORDS`` records joined into chunks there: while one chunk is
    checked and batched here, the next is framed and parsed (about three chunks
    are held at once). TF's reader takes a gzip stream that stops without its
    end (a file cut after a flush) for a whole file, so the bytes it inflated
    are counted and the stream's end checked as the defensive reader checks it
    (:func:`tfx_bridge.artifacts.tfrecord.gzip_ends`)."""
    import tensorflow as tf

    fixed = {name: tf.io.FixedLenFeature(
        [f.length], tf.float32 if f.wire == "float32" else tf.int64)
        for name, f in features.items()}
    part = part_records(chunk_records)
    parts = chunk_records // part
    index, count = share
    compression = _compression(path)

    def frame(number, serialized):
        # Inflated bytes of the part: each record and its 16 bytes of header and CRCs.
        records = tf.size(serialized)
        size = tf.reduce_sum(tf.cast(tf.strings.length(serialized), tf.int64)) + \
            16 * tf.cast(records, tf.int64)
        if count > 1:  # other readers' parts stay inside TF: framed and counted, not parsed
            serialized = serialized[:tf.cast(number // parts % count == index, tf.int32) * records]
        return number, tf.stack([size, tf.cast(records, tf.int64)]), \
            tf.io.parse_example(serialized, fixed)

    data = tf.data.TFRecordDataset([path], compression_type=compression,
                                   buffer_size=1 << 20).batch(part).enumerate()
    data = data.prefetch(1).map(frame, num_parallel_calls=2, deterministic=True)
    if parts > 1:  # parts come whole chunks at a time (the last may be short)
        data = data.ragged_batch(parts)
    data = data.prefetch(1).with_options(_tf_options())
    expected = 0  # the number of the chunk the next element holds
    read = inflated = 0  # records up to the end of the last chunk received; their bytes
    iterator = iter(data)
    while True:
        try:
            numbers, sizes, parsed = next(iterator)
        except StopIteration:
            break
        except tf.errors.InvalidArgumentError as e:
            # A chunk TF refuses is said per record as the defensive route says it.
            raise _refusal(path, features, chunk_records, expected, e) from e
        except tf.errors.OpError as e:  # a corrupt or truncated file
            raise _corrupt(path, read, e) from e
        number = int(np.reshape(numbers.numpy(), -1)[0]) // parts
        size, records = np.reshape(sizes.numpy(), (-1, 2)).sum(axis=0).tolist()
        first = number * chunk_records  # every chunk but the last is full
        expected, read, inflated = number + 1, first + records, inflated + size
        if number % count != index:
            continue
        found = {k: ((v.flat_values if isinstance(v, tf.RaggedTensor) else v).numpy(), None)
                 for k, v in parsed.items()}
        n = len(next(iter(found.values()))[0])
        yield first, n, lambda f=found, at=first, size=n: columns(
            features, f, path, at, size, owned=True)
    if compression:
        tfrecord.gzip_ends(path, inflated)


def part_records(chunk_records: int) -> int:
    """Records TF frames and parses at a time: the largest divisor of
    ``chunk_records`` up to ``PART_RECORDS``, or the whole chunk where that is
    under a quarter of it (parts of a chunk stay whole chunks' parts)."""
    part = next(d for d in range(min(PART_RECORDS, chunk_records), 0, -1)
                if chunk_records % d == 0)
    return part if part * 4 >= min(PART_RECORDS, chunk_records) else chunk_records


def _tf_options():
    import tensorflow as tf

    options = tf.data.Options()
    # Nothing here is left to tune, and an autotuned iterator's end waits for the
    # tuning thread (up to half a second a file on a busy machine).
    options.autotune.enabled = False
    # Each chunk parsed on one thread, two chunks at a time: one parse fanned out
    # over the intra-op pool waits for its slowest part when the cores are shared.
    options.threading.max_intra_op_parallelism = 1
    return options


def _refusal(path: str, features: Mapping, chunk_records: int, number: int,
             error) -> ExamplesReadError:
    """The refusal for chunk ``number``, which the fixed-length parse refused: the
    chunk read again and parsed value by value, naming the record."""
    import tensorflow as tf

    ragged = {name: tf.io.RaggedFeature(tf.float32 if f.wire == "float32" else tf.int64,
                                        row_splits_dtype=tf.int64)
              for name, f in features.items()}
    first = number * chunk_records
    try:
        serialized = next(iter(tf.data.TFRecordDataset(
            [path], compression_type=_compression(path)).batch(chunk_records)
            .skip(number).take(1)))
    except tf.errors.OpError as e:
        return _corrupt(path, first, e)
    n = int(serialized.shape[0])
    try:
        parsed = tf.io.parse_example(serialized, ragged)
    except tf.errors.InvalidArgumentError as e:
        return _undecodable(path, features, serialized.numpy().tolist(), first, e.message)
    found = {k: (v.flat_values.numpy(), v.row_lengths().numpy()) for k, v in parsed.items()}
    try:
        columns(features, found, path, first, n)
    except ExamplesReadError as e:
        return e
    return _types_error(path, first, n, error.message.split("\n")[0])


def _corrupt(path: str, read: int, error) -> ExamplesReadError:
    return ExamplesReadError(
        f"{path}: a corrupt record after record {read} ({error.message.splitlines()[0]})."
        " Re-run the component that wrote it, or read it with reader='defensive' "
        "for the exact record and byte offset.")
