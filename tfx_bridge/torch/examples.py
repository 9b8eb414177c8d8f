"""PyTorch batches from TFX Examples: the gzip TFRecords of an Examples artifact
(ExampleGen's, or Transform's materialised ``transformed_examples``) as a
``torch.utils.data.IterableDataset`` of ``{feature: tensor}`` batches.

Records are framed and parsed a chunk at a time by one of two readers
(:mod:`tfx_bridge.torch.decode`; ``reader=``): ``"tf"``, TF's C++
``TFRecordDataset`` and ``parse_example``, for Examples the pipeline's own
components wrote (the default, ``"auto"``, inside PyTorchTrainer's run_fn for
the Examples it hands over: stock StatisticsGen, Transform and Evaluator read
those files with the same reader); ``"defensive"``, every header and record
checksummed before a length is believed and tfx_bsl's decoder, for files from
outside (the default anywhere else). From there every step is a numpy
operation on the whole chunk (count checks, range checks, casts, the shuffle
permutation, slicing into batches) with the same named refusals either way.
Memory is bounded by a few chunks of ``chunk_records`` records when
streaming (TF's reader frames and parses about two ahead), and by
``memory_bytes`` of decoded features when shuffling (below). A batch's
features of one dtype and shape are views of one tensor a chunk (each a
contiguous tensor of its own to the caller).

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
  of the same inputs feed the same records in the same order (their values may
  differ in a float's last bit where Transform's analyzers combined partial
  results in another order). Over ``memory_bytes`` a reader, it
  streams (files permuted, records within chunks; a warning says so).
- **Sharding** without shuffling splits the files, or the chunks when fewer
  files than readers. Either way each record is read once per epoch.

torch is imported when this module is (``pip install 'tfx-bridge[onnx]'``);
no TFX imports.

Example:
    >>> import tempfile, tensorflow as tf
    >>> from tfx_bridge.storage import fs
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
from tfx_bridge.storage import fs
from tfx_bridge.torch import decode, order
from tfx_bridge.torch.decode import ExamplesReadError

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as e:  # pragma: no cover - exercised by the layout tests' idiom
    raise ImportError("tfx_bridge.torch.examples needs torch: "
                      "pip install 'tfx-bridge[onnx]'") from e

DEFAULT_MEMORY_BYTES = 1 << 30  # decoded features a shuffling reader holds

_DTYPES = decode.DTYPES
PIPELINE_EXAMPLES_ENV = decode.PIPELINE_EXAMPLES_ENV


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


def in_pipeline(files: Sequence[str]) -> bool:
    """Every file lies under an Examples URI PyTorchTrainer declared its own
    (``PIPELINE_EXAMPLES_ENV``): written by the pipeline, read by TF's reader."""
    import json
    import os

    try:
        roots = [r.rstrip("/") + "/" for r in json.loads(os.environ.get(
            PIPELINE_EXAMPLES_ENV, "[]")) if isinstance(r, str) and r.strip("/")]
    except ValueError:
        return False
    return bool(files) and all(".." not in f.split("/") and any(f.startswith(r) for r in roots)
                               for f in files)


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
                 memory_bytes: int = DEFAULT_MEMORY_BYTES, reader: str = "auto"):
        super().__init__()
        if not features:
            raise ExamplesReadError("No features to read: give at least one.")
        if batch_size < 1 or chunk_records < batch_size:
            raise ExamplesReadError(
                f"batch_size {batch_size} and chunk_records {chunk_records}: need "
                "1 <= batch_size <= chunk_records.")
        if not 0 <= shard[0] < shard[1]:
            raise ExamplesReadError(f"shard {shard}: need 0 <= index < count.")
        if reader not in ("auto", *decode.READERS):
            raise ExamplesReadError(f"reader {reader!r}: use 'auto', 'defensive' or 'tf'.")
        self.files = split_files(examples_uri, split) if files is None else list(files)
        self.asked_reader = reader
        self.reader = reader if reader != "auto" else (
            "tf" if in_pipeline(self.files) else "defensive")
        self.features = dict(features)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.drop_last, self.chunk_records, self.shard = drop_last, chunk_records, shard
        self.max_record_bytes, self.memory_bytes = max_record_bytes, memory_bytes
        self.epoch = 0
        self._held: Optional[Dict[str, np.ndarray]] = None  # this reader's share, sorted
        self._held_for: Optional[Tuple[int, int]] = None
        self._streams = False  # the split is over memory_bytes: shuffle by files

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
        index, readers = self._reader()
        if self._held is not None and self._held_for == (index, readers):
            return self._held
        # Decided from the whole split's count, which every reader sees alike, so
        # all readers hold or all stream (a mix would read records twice).
        row = sum(np.dtype(_DTYPES[f.dtype]).itemsize * f.length
                  for f in self.features.values())
        limit = self.memory_bytes * readers // max(1, row)
        total, parts, words = 0, [], []
        for path in sorted(self.files):
            for _, count, decoded in self._chunks(path):
                total += count
                if total > limit:
                    logging.getLogger(__name__).warning(
                        "ExamplesDataset: %s or more records of %d feature bytes are over "
                        "memory_bytes=%d a reader: shuffling by files and chunks, so the order "
                        "follows the file layout (raise memory_bytes for one order in any "
                        "layout).", total, row, self.memory_bytes)
                    self._streams = True
                    return None
                arrays = decoded()
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
        yield from _slices(arrays, n - n % self.batch_size if self.drop_last else n,
                           self.batch_size)

    def _chunks(self, path: str, share: Tuple[int, int] = (0, 1)) -> Iterator[decode.Chunk]:
        if decode.reader_for(self.asked_reader, self.reader) == "tf":
            return decode.tf_chunks(path, self.features, self.chunk_records, share)
        return decode.defensive_chunks(path, self.features, self.chunk_records,
                                       self.max_record_bytes, share)

    def _stream(self) -> Iterator[Dict[str, torch.Tensor]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        files = list(self.files)
        if self.shuffle:
            files = [files[i] for i in rng.permutation(len(files))]
        index, readers = self._reader()
        by_file = len(files) >= readers
        if by_file:
            files = files[index::readers]
        carry: Optional[Dict[str, np.ndarray]] = None
        for number, path in enumerate(files):
            # Fewer files than readers: chunk c of file f is reader (f + c) % readers's.
            share = (0, 1) if by_file else ((index - number) % readers, readers)
            for _, count, decoded in self._chunks(path, share):
                arrays = decoded()
                if self.shuffle:
                    perm = rng.permutation(count)
                    arrays = {k: v[perm] for k, v in arrays.items()}
                if carry is not None:
                    arrays = {k: np.concatenate([carry[k], v]) for k, v in arrays.items()}
                    carry = None
                n = len(next(iter(arrays.values())))
                full = n - n % self.batch_size
                yield from _slices(arrays, full, self.batch_size)
                if full < n:
                    carry = {k: v[full:] for k, v in arrays.items()}
        if carry is not None and not self.drop_last:
            yield _batch({k: torch.from_numpy(v) for k, v in carry.items()})


def _slices(arrays: Dict[str, np.ndarray], stop: int, size: int
            ) -> Iterator[Dict[str, torch.Tensor]]:
    """Batches as views of the chunk's tensors.

    Features of one dtype and shape are stacked into one tensor a chunk, and each
    batch's views of them come from one ``split`` and one ``unbind`` per stack: a
    tensor made per feature per batch in Python cost more than parsing the
    records did where records hold many narrow features.
    """
    stacks: Dict[Tuple[str, Tuple[int, ...]], List[str]] = {}
    for name, values in arrays.items():
        stacks.setdefault((values.dtype.str, values.shape[1:]), []).append(name)
    parts = []  # (names, per batch: their tensors)
    for names in stacks.values():
        if len(names) == 1:
            pieces = torch.from_numpy(arrays[names[0]][:stop]).split(size)
            parts.append((names, [(p,) for p in pieces]))
        else:  # a copy, as one tensor: batches may be written, and keep only their own
            stack = torch.from_numpy(np.stack([arrays[k][:stop] for k in names]))
            parts.append((names, [p.unbind(0) for p in stack.split(size, dim=1)]))
    order = list(arrays) if len(parts) > 1 else None
    in_worker = get_worker_info() is not None
    for i in range(len(parts[0][1]) if parts and stop else 0):
        batch: Dict[str, torch.Tensor] = {}
        for names, pieces in parts:
            batch.update(zip(names, pieces[i], strict=True))
        if order is not None:
            batch = {k: batch[k] for k in order}
        yield _WorkerBatch(batch) if in_worker else batch


def _batch(tensors: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """In a DataLoader worker, a batch that crosses to the main process by value."""
    return tensors if get_worker_info() is None else _WorkerBatch(tensors)


class _WorkerBatch(dict):
    """A batch leaving a DataLoader worker: pickled as its values' bytes (through
    the worker's result pipe) and rebuilt as a plain dict of tensors.

    torch sends a tensor's storage through shared memory instead: a segment
    created, registered and mapped per batch, which cost the main process more
    than decoding the batch did (a batch here is kilobytes; a pipe copies them
    in microseconds). ``__copy__`` keeps the type through DataLoader's
    ``default_convert``, which copies mappings.
    """

    def __copy__(self) -> _WorkerBatch:
        return _WorkerBatch(self)

    def __reduce__(self):
        return _from_arrays, ({k: t.numpy() for k, t in self.items()},)


def _from_arrays(arrays: Dict[str, np.ndarray]) -> Dict[str, torch.Tensor]:
    return {k: torch.from_numpy(a) for k, a in arrays.items()}
