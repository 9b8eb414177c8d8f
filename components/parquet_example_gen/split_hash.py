"""Split assignment: a deterministic 64-bit hash of each row's values, computed per batch.

The hash is bit-stable by contract: a change to it, or to
:func:`tfx_bridge.hashing.mix64`, moves rows between splits in every user's
existing data. tests/components/parquet_example_gen/test_split_hash.py pins
known values; they are never updated to match new code.
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
import pyarrow as pa

from tfx_bridge.hashing import GOLDEN, mix64

#
# TFX ExampleGen buckets a record by sha256 of its deterministic serialization.
# tfx_bsl's encoder serializes the feature map in an order that changes from
# process to process, so hashing its bytes would move records between splits
# from run to run. Instead each row is hashed from its values, column by column
# in name order, with numpy over whole batches: deterministic across runs and
# machines, and the same row always lands in the same split.

_U64 = np.uint64
# String bytes hashed per step: bounds the temporaries (about 45 bytes per byte).
_BYTES_PER_CHUNK = 1 << 20


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
    return mix64(hashes ^ (pos.astype(np.uint64) * GOLDEN))


def _raw_offsets(arr: pa.Array) -> np.ndarray:
    """The n+1 offsets of a (large) list or binary array, as stored (int64)."""
    large = pa.types.is_large_list(arr.type) or pa.types.is_large_binary(arr.type)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.int64 if large else np.int32)
    return raw[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def _binary_hashes(raw: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """One uint64 per binary value from its bytes (``raw``) and ``offsets`` (from 0).

    Each byte's hash depends on its value and its position in its value; a
    value's hash is the sum of its bytes' hashes. The bytes are taken in
    chunks, so the temporaries are bounded by the chunk, not by the longest
    string (whole-array temporaries took about 45 bytes per string byte).
    """
    sums = np.zeros(len(offsets) - 1, dtype=np.uint64)
    total = int(offsets[-1])
    for a in range(0, total, _BYTES_PER_CHUNK):
        b = min(a + _BYTES_PER_CHUNK, total)
        # Values overlapping [a, b): first..last, their parts inside the chunk.
        first = int(np.searchsorted(offsets, a, side="right")) - 1
        last = int(np.searchsorted(offsets, b, side="left"))
        starts = offsets[first:last]
        ends = offsets[first + 1:last + 1]
        lo = np.maximum(starts, a)
        part = np.minimum(ends, b) - lo
        pos = np.arange(a, b, dtype=np.int64) - np.repeat(starts, part)
        per_byte = mix64(mix64(raw[a:b].astype(np.uint64) + GOLDEN)
                          ^ (pos.astype(np.uint64) * GOLDEN))
        nonempty = part > 0
        sums[first:last][nonempty] += np.add.reduceat(per_byte, (lo - a)[nonempty])
    return mix64(sums + np.diff(offsets).astype(np.uint64))


def _value_hashes(values: pa.Array) -> np.ndarray:
    """One uint64 per int64 / float32 (by bits) / binary value."""
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        stored = _raw_offsets(values)
        data = values.buffers()[2]
        raw = (np.frombuffer(data, dtype=np.uint8)[stored[0]:stored[-1]]
               if data is not None else np.zeros(0, np.uint8))
        return _binary_hashes(raw, stored - stored[0])
    numbers = values.to_numpy(zero_copy_only=False)
    bits = numbers.view(np.uint32 if numbers.dtype == np.float32 else np.uint64)
    return mix64(bits.astype(np.uint64) + GOLDEN)


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
        col = col + np.diff(offsets).astype(np.uint64) * GOLDEN
        col = col ^ (np.asarray(arr.is_null(), dtype=np.uint64) * _U64(0xD6E8FEB86659FD93))
        h = mix64(h * GOLDEN + mix64(col ^ _name_seed(name)))
    return h


def bucket_of(hashes: np.ndarray, total_buckets: int) -> np.ndarray:
    """Hash bucket in [0, total_buckets) for each row hash."""
    return (hashes % _U64(total_buckets)).astype(np.int64)


