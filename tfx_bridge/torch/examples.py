"""PyTorch batches from TFX Examples: the gzip TFRecords of an Examples artifact
(ExampleGen's, or Transform's materialised ``transformed_examples``) as a
``torch.utils.data.IterableDataset`` of ``{feature: tensor}`` batches.

Records are framed by :mod:`tfx_bridge.artifacts.tfrecord` (every header and record
checksummed, lengths bounded) and decoded a chunk at a time by tfx_bsl's C++
``ExamplesToRecordBatchDecoder`` into Arrow; from there every step is a numpy
operation on the whole chunk (count checks, range checks, casts, the shuffle
permutation, slicing into batches), so no Python runs per example beyond the
framing. Memory is bounded by ``chunk_records`` records when streaming, and
by ``memory_bytes`` of decoded features when shuffling (below).

- **Features** are declared (:class:`Feature`: dtype and values per example)
  or read from a schema (:func:`features_from_schema`, e.g. Transform's
  ``transformed_metadata/schema.pbtxt``). A feature with one value per example
  becomes a 1-D tensor, one with ``length`` values a 2-D ``[batch, length]``
  tensor. A record with a different number of values is refused naming the
  feature, the file and the record.
- **Dtypes:** int64 on the wire becomes ``int32`` where asked, after a range
  check that names the feature, file, record and value; an int64 feature may
  be read as a float tensor (``wire="int64"``). Strings are refused: map them
  to ids in the ``preprocessing_fn``.
- **Shuffling is by content** (``shuffle=True``): each reader (DataLoader
  worker, and ``shard=(index, count)``, e.g. a distributed rank) decodes every
  file, keeps the records whose seeded content key (:mod:`.order`) falls to it,
  sorts them by value and permutes them by ``(seed, epoch)`` (:meth:`set_epoch`),
  reusing them in later epochs. Who reads a record and when depend on the records
  and seed only, not on the files a runner wrote: DirectRunner and portable runs
  of the same inputs train the same weights. Over ``memory_bytes`` a reader, it
  streams (files permuted, records within chunks; a warning says so).
- **Sharding** without shuffling splits the files, or the chunks when fewer
  files than readers. Either way each record is read once per epoch.

torch is imported when this module is (``pip install 'tfx-bridge[onnx]'``);
no TFX imports.

Example:
    >>> import tempfile, tensorflow as tf
    >>> from tfx_bridge import fs
    >>> root = tempfile.mkdtemp()
    >>> fs.makedirs(fs.join(root, "Split-train"))
    >>> opts = tf.io.TFRecordOptions(compression_type="GZIP")
    >>> with tf.io.TFRecordWriter(fs.join(root, "Split-train", "d.gz"), opts) as w:
    ...     for i in range(5):
    ...         w.write(tf.train.Example(features=tf.train.Features(feature={
    ...             "x": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))})
    ...             ).SerializeToString())
    >>> ds = ExamplesDataset(root, "train", {"x": Feature("int32")}, batch_size=2)
    >>> [b["x"].tolist() for b in ds]
    [[0, 1], [2, 3], [4]]
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tfx_bridge.artifacts import tfrecord
from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs
from tfx_bridge.torch import order

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as e:  # pragma: no cover - exercised by the layout tests' idiom
    raise ImportError("tfx_bridge.torch.examples needs torch: "
                      "pip install 'tfx-bridge[onnx]'") from e

DEFAULT_MEMORY_BYTES = 1 << 30  # decoded features a shuffling reader holds

_DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32,
           "int64": np.int64, "int16": np.int16, "uint8": np.uint8, "bool": np.bool_}


class ExamplesReadError(BridgeError):
    """Examples that cannot become the declared tensors (names feature, file, record)."""


@dataclasses.dataclass(frozen=True)
class Feature:
    """A feature to read: the tensor dtype, values per example (1: a 1-D tensor;
    ``length`` > 1: a 2-D ``[batch, length]`` tensor) and the tf.Example list it is
    stored in, ``wire`` ``"int64"`` or ``"float32"`` (default: from ``dtype``; an
    int64 label read as ``float32`` says ``wire="int64"``)."""

    dtype: str = "float32"
    length: int = 1
    wire: Optional[str] = None

    def __post_init__(self):
        if self.dtype not in _DTYPES:
            raise ExamplesReadError(f"dtype {self.dtype!r}: use one of {sorted(_DTYPES)}.")
        if not isinstance(self.length, int) or self.length < 1:
            raise ExamplesReadError(f"length {self.length!r}: values per example must be >= 1.")
        if self.wire is None:
            object.__setattr__(self, "wire",
                               "float32" if self.dtype.startswith("float") else "int64")
        if self.wire not in ("int64", "float32"):
            raise ExamplesReadError(f"wire {self.wire!r}: tf.Examples hold int64 or float32.")


def features_from_schema(schema, dtypes: Optional[Mapping[str, str]] = None,
                         exclude: Sequence[str] = ()) -> Dict[str, Feature]:
    """Features of a TFMD schema with a fixed shape: INT -> int64 (or ``dtypes[name]``,
    e.g. ``"int32"``), FLOAT -> float32. BYTES features are refused by name unless in
    ``exclude``; so is a feature without a fixed shape (``shape`` or value_count
    min == max)."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    dtypes = dict(dtypes or {})
    out, problems = {}, []
    for f in schema.feature:
        if f.name in exclude:
            continue
        if f.type == schema_pb2.BYTES:
            problems.append(f"{f.name!r} holds strings (map them to ids in the "
                            "preprocessing_fn, or exclude it)")
            continue
        if f.HasField("shape"):
            length = int(np.prod([d.size for d in f.shape.dim])) if f.shape.dim else 1
        elif f.HasField("value_count") and f.value_count.min == f.value_count.max > 0:
            length = int(f.value_count.max)
        else:
            problems.append(f"{f.name!r} has no fixed number of values (give it a shape)")
            continue
        wire = "int64" if f.type == schema_pb2.INT else "float32"
        out[f.name] = Feature(dtypes.pop(f.name, wire), length, wire)
    if dtypes:
        have = sorted(f.name for f in schema.feature)
        problems.append(
            f"features {sorted(dtypes)} are not in the schema (it has {have}): with "
            "Transform, the preprocessing_fn does not output them. Return every feature the "
            "model or its label needs from preprocessing_fn (a label passes through as "
            "outputs['label'] = inputs['label'])")
    if problems:
        raise ExamplesReadError("Cannot read the schema's features as tensors: "
                                + "; ".join(problems) + ".")
    return out


def split_files(examples_uri: str, split: str) -> List[str]:
    """The record files of one split of an Examples artifact, sorted."""
    folder = fs.join(examples_uri, f"Split-{split}")
    if not fs.isdir(folder):
        have = sorted(d[len("Split-"):] for d in fs.listdir(examples_uri)
                      if d.startswith("Split-")) if fs.isdir(examples_uri) else []
        raise ExamplesReadError(f"{examples_uri} has no split {split!r} (splits: {have}).")
    files = [f for f in fs.glob(fs.join(folder, "*")) if fs.isfile(f)]
    if not files:
        raise ExamplesReadError(f"{folder} holds no record files.")
    return files


def _schema_for(features: Mapping[str, Feature]):
    """A decoding schema naming only the features read: the decoder skips the rest."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    for name, feature in features.items():
        kind = schema_pb2.FLOAT if feature.wire == "float32" else schema_pb2.INT
        schema.feature.add(name=name, type=kind)
    return schema.SerializeToString()


class ExamplesDataset(IterableDataset):
    """Batches of ``{feature: tensor}`` from one split of an Examples artifact.

    Use with ``DataLoader(dataset, batch_size=None, num_workers=N)``: batching
    happens here, a chunk at a time. ``seed`` fixes the order (with the same
    number of readers, whatever the file layout: see the module's notes); call
    :meth:`set_epoch` before each epoch to reshuffle.
    """

    def __init__(self, examples_uri: str, split: str, features: Mapping[str, Feature],
                 batch_size: int = 256, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False, chunk_records: int = 8192,
                 shard: Tuple[int, int] = (0, 1),
                 max_record_bytes: int = tfrecord.DEFAULT_MAX_RECORD_BYTES,
                 files: Optional[Sequence[str]] = None,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES):
        super().__init__()
        if not features:
            raise ExamplesReadError("No features to read: give at least one.")
        if batch_size < 1 or chunk_records < batch_size:
            raise ExamplesReadError(
                f"batch_size {batch_size} and chunk_records {chunk_records}: need "
                "1 <= batch_size <= chunk_records.")
        if not 0 <= shard[0] < shard[1]:
            raise ExamplesReadError(f"shard {shard}: need 0 <= index < count.")
        self.files = split_files(examples_uri, split) if files is None else list(files)
        self.features = dict(features)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.drop_last, self.chunk_records, self.shard = drop_last, chunk_records, shard
        self.max_record_bytes, self.memory_bytes = max_record_bytes, memory_bytes
        self.epoch = 0
        self._held: Optional[Dict[str, np.ndarray]] = None  # this reader's share, sorted
        self._held_for: Optional[Tuple[int, int]] = None
        self._streams = False  # the split is over memory_bytes: shuffle by files
        self._schema = _schema_for(self.features)

    @classmethod
    def from_patterns(cls, patterns: Sequence[str], features: Mapping[str, Feature],
                      **kwargs) -> ExamplesDataset:
        """The records of the files matching ``patterns``, e.g. a Trainer's
        ``fn_args.train_files`` (``.../Split-train/*``)."""
        files = sorted({f for p in patterns for f in fs.glob(p) if fs.isfile(f)})
        if not files:
            raise ExamplesReadError(f"No record files match {list(patterns)}.")
        return cls("", "", features, files=files, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _reader(self) -> Tuple[int, int]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        return self.shard[0] * workers + worker, self.shard[1] * workers

    def __iter__(self) -> Iterator[Dict[str, torch.Tensor]]:
        if self.shuffle and not self._streams:
            held = self._share()
            if held is not None:
                yield from self._batches(held)
                return
        yield from self._stream()

    def _share(self) -> Optional[Dict[str, np.ndarray]]:
        """This reader's records by content key, sorted by value; None (and
        streaming from then on) when the split is over ``memory_bytes`` a reader."""
        from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

        index, readers = self._reader()
        if self._held is not None and self._held_for == (index, readers):
            return self._held
        decoder = ExamplesToRecordBatchDecoder(self._schema)
        # Decided from the whole split's count, which every reader sees alike, so
        # all readers hold or all stream (a mix would read records twice).
        row = sum(np.dtype(_DTYPES[f.dtype]).itemsize * f.length
                  for f in self.features.values())
        limit = self.memory_bytes * readers // max(1, row)
        total, parts, words = 0, [], []
        for path in sorted(self.files):
            for batch in tfrecord.read_batches(path, self.chunk_records,
                                               max_record_bytes=self.max_record_bytes):
                total += len(batch.records)
                if total > limit:
                    logging.getLogger(__name__).warning(
                        "ExamplesDataset: %s or more records of %d feature bytes are over "
                        "memory_bytes=%d a reader: shuffling by files and chunks, so the order "
                        "follows the file layout (raise memory_bytes for one order in any "
                        "layout).", total, row, self.memory_bytes)
                    self._streams = True
                    return None
                arrays = self._decode(decoder, batch.records, path, batch.first)
                rows = order.row_words(arrays)
                mine = order.keys(rows, self.seed) % np.uint64(readers) == np.uint64(index)
                parts.append({k: v[mine] for k, v in arrays.items()})
                words.append(rows[mine])
        held = {}  # no records: no batch
        if parts:
            sort = order.canonical(np.concatenate(words))
            held = {k: np.concatenate([p[k] for p in parts])[sort] for k in self.features}
        self._held, self._held_for = held, (index, readers)
        return held

    def __getstate__(self):  # DataLoader workers read their own share, not ours
        return {**self.__dict__, "_held": None, "_held_for": None}

    def _batches(self, held: Dict[str, np.ndarray]) -> Iterator[Dict[str, torch.Tensor]]:
        n = len(next(iter(held.values()))) if held else 0
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(n)
        arrays = {k: v[perm] for k, v in held.items()}  # a copy: batches may be written
        end = n - n % self.batch_size if self.drop_last else n
        for start in range(0, end, self.batch_size):
            yield {k: torch.from_numpy(v[start:start + self.batch_size])
                   for k, v in arrays.items()}

    def _stream(self) -> Iterator[Dict[str, torch.Tensor]]:
        from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

        decoder = ExamplesToRecordBatchDecoder(self._schema)
        rng = np.random.default_rng([self.seed, self.epoch])
        files = list(self.files)
        if self.shuffle:
            files = [files[i] for i in rng.permutation(len(files))]
        index, readers = self._reader()
        by_file = len(files) >= readers
        if by_file:
            files = files[index::readers]
        unit = 0  # chunks seen, for chunk sharding
        carry: Optional[Dict[str, np.ndarray]] = None
        for path in files:
            for batch in tfrecord.read_batches(path, self.chunk_records,
                                               max_record_bytes=self.max_record_bytes):
                mine = by_file or unit % readers == index
                unit += 1
                if not mine:
                    continue
                arrays = self._decode(decoder, batch.records, path, batch.first)
                if self.shuffle:
                    order = rng.permutation(len(batch.records))
                    arrays = {k: v[order] for k, v in arrays.items()}
                if carry is not None:
                    arrays = {k: np.concatenate([carry[k], v]) for k, v in arrays.items()}
                    carry = None
                n = len(next(iter(arrays.values())))
                full = n - n % self.batch_size
                for start in range(0, full, self.batch_size):
                    yield {k: torch.from_numpy(v[start:start + self.batch_size])
                           for k, v in arrays.items()}
                if full < n:
                    carry = {k: v[full:] for k, v in arrays.items()}
        if carry is not None and not self.drop_last:
            yield {k: torch.from_numpy(v) for k, v in carry.items()}

    def _decode(self, decoder, records: List[bytes], path: str, first: int
                ) -> Dict[str, np.ndarray]:
        import pyarrow as pa

        try:
            table = decoder.DecodeBatch(records)
        except Exception as e:  # noqa: BLE001  (the C++ decoder's error names no record)
            raise ExamplesReadError(
                f"{path}, records {first}-{first + len(records) - 1}: not tf.Examples of the "
                f"declared types ({e}). Check each feature's wire type (int64 or float32) "
                "against the data.") from e
        out = {}
        for name, feature in self.features.items():
            index = table.schema.get_field_index(name)
            column = table.column(index) if index >= 0 else pa.nulls(len(records),
                                                                      pa.list_(pa.int64()))
            offsets = np.asarray(column.offsets)
            counts = np.diff(offsets)
            if column.null_count:
                counts = np.where(np.asarray(column.is_null()), 0, counts)
            bad = np.flatnonzero(counts != feature.length)
            if bad.size:
                raise ExamplesReadError(
                    f"{path}, record {first + int(bad[0])}: feature {name!r} has "
                    f"{int(counts[bad[0]])} values, expected {feature.length} "
                    f"({bad.size} of {len(records)} records in this chunk differ). Fix the "
                    "data or the feature's declared length.")
            values = np.asarray(column.values)[offsets[0]:offsets[-1]]
            out[name] = self._cast(name, feature, values, path, first).reshape(
                (-1, feature.length) if feature.length > 1 else (-1,))
        return out

    @staticmethod
    def _cast(name: str, feature: Feature, values: np.ndarray, path: str,
              first: int) -> np.ndarray:
        target = np.dtype(_DTYPES[feature.dtype])
        if values.dtype.kind == "f" and target.kind in "iub":
            raise ExamplesReadError(
                f"{path}: feature {name!r} holds floats; declared {feature.dtype}. Declare a "
                "float dtype, or write it as an integer feature.")
        if target.kind in "iub":
            # bool takes 0 and 1 only: a cast would turn 2 into True without a word.
            low, high = (0, 1) if target.kind == "b" else (np.iinfo(target).min,
                                                            np.iinfo(target).max)
            out_of_range = np.flatnonzero((values < low) | (values > high))
            if out_of_range.size:
                at = int(out_of_range[0])
                record = first + at // feature.length
                raise ExamplesReadError(
                    f"{path}, record {record}: feature {name!r} = {int(values[at])} does not "
                    f"fit {feature.dtype} [{low}, {high}] ({out_of_range.size} values "
                    "in this chunk). Declare int64, or fix the data upstream.")
        out = np.array(values, dtype=target, copy=True)
        if values.dtype.kind in "iu" and target.kind == "f":
            inexact = _inexact_ints(values, out)
            if inexact.size:
                at = int(inexact[0])
                raise ExamplesReadError(
                    f"{path}, record {first + at // feature.length}: feature {name!r} = "
                    f"{int(values[at])} is not exactly a {feature.dtype} (it would become "
                    f"{float(out[at])!r}; {inexact.size} such values in this chunk). Declare int64 "
                    "(or float64), or fix the data upstream.")
        # A copy in any case: Arrow's buffers are read-only, and training code may
        # write into its batches (torch does not protect a read-only array's memory).
        return out


def _inexact_ints(values: np.ndarray, floats: np.ndarray) -> np.ndarray:
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
