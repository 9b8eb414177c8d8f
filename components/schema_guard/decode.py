"""Reading an Examples split for SchemaGuard: its files, record batches (checked
TFRecord reads) and their decoding into Arrow, mixed wire kinds included."""
from __future__ import annotations

import re
from typing import Iterator, List, Optional, Sequence, Tuple

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


class Decoder:
    def __init__(self):
        from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder
        self._decoder = ExamplesToRecordBatchDecoder()

    def decode(self, records: List[bytes]) -> List[Tuple[pa.RecordBatch, np.ndarray]]:
        """Decoded groups and the record indices (into ``records``) of their rows.

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
                out.append((self._decoder.DecodeBatch(batch), index))
                continue
            except RuntimeError as e:
                m = _WRONG_TYPE.search(str(e))
                if not m:
                    raise NotExamples(self._unparseable(batch, index), str(e)) from e
                kinds = _wire_kinds(batch, m.group(2))
            # Records without the feature join the largest group.
            values, counts = np.unique(kinds[kinds != ""].astype(str), return_counts=True)
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


class NotExamples(Exception):
    """Records of a batch that do not parse as tf.Example (indices into the batch)."""

    def __init__(self, indices: List[int], message: str):
        super().__init__(message)
        self.indices = indices
