"""Reading an Examples split for SchemaGuard: its files, record batches (checked
TFRecord reads) and their decoding into Arrow, mixed wire kinds included."""
from __future__ import annotations

import re
from typing import Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from tfx_bridge.artifacts import tfrecord
from tfx_bridge.components.schema_guard.contract import (
    WIRE_BYTES,
    WIRE_FLOAT,
    WIRE_INT,
)
from tfx_bridge.components.schema_guard.errors import (
    SchemaGuardInputError,
)
from tfx_bridge.storage import fs
from tfx_bridge.storage.names import check_segment

# --------------------------------------------------------------------------- reading


def split_files(examples_dir: str, split: str) -> List[str]:
    folder = fs.join(examples_dir, f"Split-{split}")
    if not fs.isdir(folder):
        have = sorted(d[6:] for d in fs.listdir(examples_dir) if d.startswith("Split-")) \
            if fs.isdir(examples_dir) else []
        raise SchemaGuardInputError(
            f"No split {split!r} in {examples_dir} (no Split-{split}/); splits there: {have}.")
    files = [p for p in (fs.join(folder, e) for e in fs.listdir(folder)) if not fs.isdir(p)]
    if not files:
        raise SchemaGuardInputError(f"{folder} holds no records files.")
    return files


def list_splits(examples_dir: str) -> List[str]:
    if not fs.isdir(examples_dir):
        raise SchemaGuardInputError(f"Examples folder {examples_dir} does not exist.")
    # Read-back names are checked whole, as given ones are: each names a report folder.
    splits = sorted(check_segment(d[len("Split-"):], f"Split folder {d!r} in {examples_dir}: "
                                  "split name")
                    for d in fs.listdir(examples_dir)
                    if d.startswith("Split-") and fs.isdir(fs.join(examples_dir, d)))
    if not splits:
        raise SchemaGuardInputError(
            f"{examples_dir} has no Split-<name>/ folders; give an Examples artifact folder "
            "(as ParquetExampleGen or `tfx-bridge ingest` writes).")
    return splits


def read_record_batches(path: str, batch_size: int,
                        max_record_bytes: int = tfrecord.DEFAULT_MAX_RECORD_BYTES,
                        shown: Optional[str] = None) -> Iterator[Tuple[int, List[bytes]]]:
    """(index of the first record in the file, serialized records) per batch.

    Read with tfx_bridge.artifacts.tfrecord, which checks every header and record before
    trusting a length: a forged header is a refusal naming file and offset, not
    a crash in TF's reader.
    """
    for batch in tfrecord.read_batches(path, batch_size, max_record_bytes=max_record_bytes,
                                       shown=shown or fs.basename(path)):
        yield batch.first, batch.records


# --------------------------------------------------------------------------- decoding


_WRONG_TYPE = re.compile(r'found (\w+) for feature "(.*)"')


def _wire_kinds(records: Sequence[bytes], feature: str) -> np.ndarray:
    """Per record, the wire kind of ``feature`` ('' when absent or kind unset)."""
    import tensorflow as tf

    feats = tf.io.decode_proto(list(records), "tensorflow.Example", ["features"],
                               [tf.string]).values[0][:, 0]
    entries = tf.io.decode_proto(feats, "tensorflow.Features", ["feature"], [tf.string])
    sizes = entries.sizes[:, 0].numpy()
    flat = tf.boolean_mask(entries.values[0],
                           tf.sequence_mask(sizes, tf.shape(entries.values[0])[1]))
    kv = tf.io.decode_proto(flat, "tensorflow.Features.FeatureEntry", ["key", "value"],
                            [tf.string, tf.string])
    keys = kv.values[0][:, 0].numpy()
    kinds = tf.io.decode_proto(kv.values[1][:, 0], "tensorflow.Feature",
                               ["bytes_list", "float_list", "int64_list"],
                               [tf.string] * 3).sizes.numpy()
    names = np.array(["", WIRE_BYTES, WIRE_FLOAT, WIRE_INT], dtype=object)
    kind_of_entry = names[(kinds * np.array([1, 2, 3])).max(axis=1)]
    owner = np.repeat(np.arange(len(records)), sizes)
    out = np.full(len(records), "", dtype=object)
    mine = keys == feature.encode()
    out[owner[mine]] = kind_of_entry[mine]
    return out


def kind_of(arr: pa.Array) -> Optional[str]:
    t = arr.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return None
    v = t.value_type
    if pa.types.is_integer(v):
        return WIRE_INT
    if pa.types.is_floating(v):
        return WIRE_FLOAT
    if pa.types.is_binary(v) or pa.types.is_large_binary(v) or pa.types.is_string(v):
        return WIRE_BYTES
    return None


_PARSE_RECORD_BYTES = 1 << 20


class Decoder:
    """Records -> Arrow record batches, as tfx_bsl's ``ExamplesToRecordBatchDecoder``
    decodes them: one large_list column per feature present in the batch, null
    where a record lacks the feature.

    With ``wires`` (feature -> wire kind: the schema's and the consumer's), most
    records take a faster route with the same result: TF's ``parse_example``
    reads those features, and ``decode_proto`` lists each record's feature
    entries. A record whose every entry is one of those features with at least
    one value (no other feature, no empty or kind-less entry, no repeated key),
    each entry exactly the size of its parsed content written canonically, is
    then fully described by the parse; any other record, and any batch
    ``parse_example`` refuses (a feature of another kind, a record that is not
    a tf.Example), is decoded by tfx_bsl as before.
    """

    def __init__(self, wires: Optional[Mapping[str, str]] = None):
        from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder
        self._decoder = ExamplesToRecordBatchDecoder()
        self._wires = dict(wires or {})
        self._spec = None

    def decode(self, records: List[bytes]) -> List[Tuple[pa.RecordBatch, np.ndarray]]:
        """Decoded groups and the record indices (into ``records``) of their rows."""
        # Records of megabytes go to tfx_bsl: the parse holds a few copies of a batch's
        # values at once, which costs nothing for small records and too much for large.
        parsed = self._parsed(records) if self._wires and max(
            map(len, records), default=0) <= _PARSE_RECORD_BYTES else None
        if parsed is None:
            return self._decoded(records, np.arange(len(records)))
        batch, exact = parsed
        kept = np.flatnonzero(exact)
        if kept.size == len(records):
            return [(batch, kept)]
        rest = np.flatnonzero(~exact)
        out = self._decoded([records[i] for i in rest], rest)
        if kept.size:
            out.append((_rows(batch, kept), kept))
        return out

    def _parsed(self, records: List[bytes]) -> Optional[Tuple[pa.RecordBatch, np.ndarray]]:
        """(the wires' features as a record batch, which records it describes
        whole); None where ``parse_example`` refuses the batch."""
        import tensorflow as tf

        if self._spec is None:
            kinds = {WIRE_INT: tf.int64, WIRE_FLOAT: tf.float32, WIRE_BYTES: tf.string}
            self._spec = {name: tf.io.RaggedFeature(kinds[wire], row_splits_dtype=tf.int64)
                          for name, wire in self._wires.items()}
        serialized = tf.constant(records)  # converted once, for the parse and the count
        try:
            parsed = tf.io.parse_example(serialized, self._spec)
        except (tf.errors.OpError, UnicodeDecodeError):  # TF's message may quote the bytes
            return None
        n = len(records)
        try:
            entries = _Entries(serialized)
        except (tf.errors.OpError, UnicodeDecodeError):
            return None
        described = np.zeros(n, np.int64)  # entries the parse accounts for, per record
        features_bytes = np.zeros(n, np.int64)  # their canonical encoding's size, per record
        canonical = {}  # per feature, its entry's canonical size in each record (-1: absent)
        names, arrays = [], []
        for name, ragged in parsed.items():
            splits = ragged.row_splits.numpy()
            counts = np.diff(splits)
            present = counts > 0
            if not present.any():
                continue
            described += present
            values = ragged.flat_values
            owner = np.repeat(np.arange(n), counts)
            if values.dtype == tf.string:
                lengths = tf.strings.length(values).numpy().astype(np.int64)
                offsets = np.zeros(len(lengths) + 1, np.int64)
                np.cumsum(lengths, out=offsets[1:])
                flat = pa.LargeBinaryArray.from_buffers(
                    pa.large_binary(), len(lengths),
                    [None, pa.py_buffer(offsets),
                     pa.py_buffer(tf.strings.reduce_join(values).numpy())])
                # BytesList: each value its own field (tag, length, bytes).
                listed = np.bincount(owner, 1 + _varint_bytes(lengths) + lengths, n)
            else:
                numbers = values.numpy()
                flat = pa.array(numbers)
                packed = (4 * counts if numbers.dtype == np.float32 else
                          np.bincount(owner, _varint_bytes(numbers), n))
                listed = 1 + _varint_bytes(packed) + packed  # the packed field
            entry = _entry_bytes(name, listed.astype(np.int64))
            features_bytes += np.where(present, 1 + _varint_bytes(entry) + entry, 0)
            canonical[name] = np.where(present, entry, -1)
            # A record without values is one without the feature (others are not
            # described by the parse, below): null, as tfx_bsl decodes it.
            mask = np.append(~present, False)
            names.append(name)
            arrays.append(pa.LargeListArray.from_arrays(pa.array(splits, mask=mask), flat))
        if not names:
            return None
        # A record with no entries at all (an empty tf.Example) is left to tfx_bsl too.
        # parse_example reads a Feature's first list field only and ignores what
        # follows, where protobuf merges a repeated field, lets the last of the oneof
        # win and refuses trailing bytes. So the parse describes a record only where
        # each of its entries, one by one, and the record as a whole are exactly the
        # size of the parsed content written canonically (as TF and tfx_bsl write it).
        # Anything protobuf would read beyond the parse costs at least two bytes (a tag
        # and a value) in the entry that holds it, and nothing in that entry can give
        # them back: the one shorter form, a single value written unpacked, is read
        # alike by both, and after it the parse refuses any other field. A size kept
        # by shortening one entry to hide bytes in another fails its entry's check.
        sizes = np.fromiter(map(len, records), np.int64, n)
        exact = ((entries.counts == described) & (described > 0) & entries.once
                 & entries.sized_as(canonical)
                 & (sizes == 1 + _varint_bytes(features_bytes) + features_bytes))
        return pa.RecordBatch.from_arrays(arrays, names), exact

    def _decoded(self, records: List[bytes], where: np.ndarray
                 ) -> List[Tuple[pa.RecordBatch, np.ndarray]]:
        """tfx_bsl's decoding, indices mapped through ``where``.

        Usually one group. When records disagree on a feature's wire kind the
        decoder refuses the batch; it is then split by that feature's kind (read
        with ``decode_proto``), so each group is uniform and every record is
        still checked for everything else.
        """
        out = []
        pending = [np.arange(len(records))]
        while pending:
            index = pending.pop()
            batch = [records[i] for i in index]
            try:
                out.append((self._decoder.DecodeBatch(batch), where[index]))
                continue
            except RuntimeError as error:
                e = error
                m = _WRONG_TYPE.search(str(e))
                if not m:
                    raise NotExamples([int(where[i]) for i in self._unparseable(batch, index)],
                                      str(e)) from e
                kinds = _wire_kinds(batch, m.group(2))
            # Records without the feature join the largest group.
            values, counts = np.unique(kinds[kinds != ""].astype(str), return_counts=True)
            if len(values) < 2:
                # decode_proto saw one kind where tfx_bsl saw two (a Feature carrying
                # several list fields: protobuf keeps the last): halves, down to
                # single records, which decode alone.
                if len(index) == 1:
                    raise NotExamples([int(where[index[0]])], str(e))
                half = len(index) // 2
                pending += [index[:half], index[half:]]
                continue
            majority = values[np.argmax(counts)]
            kinds[kinds == ""] = majority
            for kind in values:
                pending.append(index[kinds == kind])
        return out

    def _unparseable(self, batch: List[bytes], index: np.ndarray) -> List[int]:
        """Indices (into the caller's records) of the records that are not tf.Examples."""
        bad = []
        for i, record in zip(index, batch, strict=True):
            try:
                self._decoder.DecodeBatch([record])
            except RuntimeError as e:
                if not _WRONG_TYPE.search(str(e)):
                    bad.append(int(i))
        return bad


class _Entries:
    """The feature map entries of each record as protobuf lists them: every
    occurrence counted, not merged away (field 1 read as repeated bytes at both
    levels: Example.features, then Features.feature), with each entry's size
    and the key its first field holds."""

    def __init__(self, records):
        import tensorflow as tf

        n = int(records.shape[0])
        features = tf.io.decode_proto(records, "tfx_bridge.Ones", ["one"], [tf.string],
                                      descriptor_source=_ONES)
        # False for a record whose ``features`` field occurs more than once (protobuf
        # merges them).
        self.once = features.sizes[:, 0].numpy() <= 1
        self.counts = np.zeros(n, np.int64)
        self._owner = self._sizes = self._keys = np.zeros(0, np.int64)
        if features.values[0].shape[1] == 0:
            return
        entries = tf.io.decode_proto(features.values[0][:, 0], "tfx_bridge.Ones", ["one"],
                                     [tf.string], descriptor_source=_ONES)
        counts = entries.sizes[:, 0].numpy().astype(np.int64)
        self.counts = np.where(self.once, counts, -1)
        # Padded [record, entry] tensors, read where the record has that entry.
        padded = entries.values[0]
        mine = np.arange(padded.shape[1]) < counts[:, None]
        self._owner = np.repeat(np.arange(n), counts)
        sizes = tf.strings.length(padded).numpy()
        self._sizes = sizes[mine].astype(np.int64)
        # The key of an entry that starts as written canonically (field 1, a one-byte
        # length): hashed, to be told by number. Any other entry matches no name.
        head = tf.io.decode_raw(tf.strings.substr(padded, 0, 2), tf.uint8,
                                fixed_length=2).numpy()
        plain = (head[..., 0] == 0x0A) & (head[..., 1] < 0x80) & (sizes >= 2 + head[..., 1])
        lengths = np.where(plain, head[..., 1], 0).astype(np.int32)
        keys = tf.strings.to_hash_bucket_fast(tf.strings.substr(
            padded, np.where(plain, 2, 0).astype(np.int32), lengths), _KEY_BUCKETS)
        self._keys = np.where(plain, keys.numpy(), -1)[mine]

    def sized_as(self, canonical: Mapping[str, np.ndarray]) -> np.ndarray:
        """Per record: every entry is keyed by a name of ``canonical`` and exactly
        ``canonical[name][record]`` bytes long (a negative size: the record has no
        such entry)."""
        import tensorflow as tf

        n = len(self.counts)
        names = list(canonical)
        hashes = tf.strings.to_hash_bucket_fast(names, _KEY_BUCKETS).numpy()
        if len(set(hashes.tolist())) < len(names):  # never seen; told apart by size alone
            return np.zeros(n, bool)
        order = np.argsort(hashes)
        at = np.clip(np.searchsorted(hashes[order], self._keys), 0, len(names) - 1)
        named = hashes[order][at] == self._keys
        want = np.stack([canonical[name] for name in names])[order[at], self._owner]
        wrong = ~named | (self._sizes != want)
        return np.bincount(self._owner[wrong], minlength=n) == 0


_KEY_BUCKETS = (1 << 62) - 57  # hash range for feature keys: collisions left to chance


def _ones_descriptor() -> bytes:
    from google.protobuf import descriptor_pb2

    files = descriptor_pb2.FileDescriptorSet()
    file = files.file.add(name="tfx_bridge_ones.proto", package="tfx_bridge")
    field = file.message_type.add(name="Ones").field.add(name="one", number=1)
    field.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    return b"bytes://" + files.SerializeToString()


_ONES = _ones_descriptor()


_VARINT_BOUNDS = np.array([1 << (7 * k) for k in range(1, 10)], np.uint64)


def _varint_bytes(values: np.ndarray) -> np.ndarray:
    """Bytes of each value's protobuf varint (an int64 below 0: ten)."""
    return np.searchsorted(_VARINT_BOUNDS, values.astype(np.int64).view(np.uint64),
                           side="right") + 1


def _entry_bytes(name: str, listed: np.ndarray) -> np.ndarray:
    """Bytes of the content of ``Features.feature`` map entries (key, Feature with
    one list field of ``listed`` bytes), written canonically."""
    key = len(name.encode())
    feature = 1 + _varint_bytes(listed) + listed
    return 1 + _varint_bytes(np.array([key]))[0] + key + 1 + _varint_bytes(feature) + feature


def _rows(batch: pa.RecordBatch, rows: np.ndarray) -> pa.RecordBatch:
    """Those rows, with the columns that have a value in them (as tfx_bsl would
    decode those records alone; each row has one, so a column remains)."""
    taken = batch.take(pa.array(rows))
    keep = [i for i, column in enumerate(taken.columns) if column.null_count < len(column)]
    return pa.RecordBatch.from_arrays([taken.column(i) for i in keep],
                                      [taken.schema.names[i] for i in keep])


class NotExamples(Exception):
    """Records of a batch that do not parse as tf.Example (indices into the batch)."""

    def __init__(self, indices: List[int], message: str):
        super().__init__(message)
        self.indices = indices
