"""TFRecord framing and the batched sink: one Beam element per batch of records.

The sink compresses and writes on a thread of its own (:class:`BackgroundWriter`):
zlib releases the GIL while it deflates, which is about half of an ingest's
work, so conversion and compression use both cores of one process.
"""
from __future__ import annotations

import itertools
import queue
import struct
import threading
import weakref
from typing import Dict, List, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io import filebasedsink
from apache_beam.io.filesystem import CompressionTypes
from google_crc32c import value as _CRC32C  # C implementation

from tfx_bridge.artifacts.tfrecord import masked_crc, masked_crcs
from tfx_bridge.components.parquet_example_gen.arrow_types import (
    RECORD_FILE_SUFFIX,
)

_HEADERS: Dict[int, bytes] = {}


def _header(length: int) -> bytes:
    """Length + its masked crc; record lengths repeat, so these are cached."""
    header = _HEADERS.get(length)
    if header is None:
        packed = struct.pack("<Q", length)
        header = packed + struct.pack("<I", masked_crc(packed))
        if len(_HEADERS) < 1 << 16:
            _HEADERS[length] = header
    return header


def tfrecord_frames(records: Sequence[bytes]) -> bytes:
    """TFRecord framing of many records as one buffer (one write call).

    Each record is ``len | masked_crc(len) | data | masked_crc(data)``; the
    crcs are computed in C per record and masked with numpy for the batch.
    """
    return b"".join(_framed_parts(records))


# Records at least this long are written on their own, not joined into one
# buffer with their batch: a 50 MB string would otherwise be held twice more.
_LARGE_RECORD = 1 << 20


def _framed_parts(records: Sequence[bytes]):
    n = len(records)
    crcs = np.fromiter(map(_CRC32C, records), dtype=np.uint32, count=n)
    trailer = masked_crcs(crcs).astype("<u4").tobytes()
    headers = [_header(len(r)) for r in records]
    trailers = [trailer[i:i + 4] for i in range(0, 4 * n, 4)]
    return itertools.chain.from_iterable(zip(headers, records, trailers, strict=True))


def write_frames(file_handle, records: Sequence[bytes]) -> None:
    """Writes ``records`` framed, in runs of small records joined and large ones alone."""
    start = 0
    for i, r in enumerate(records):
        if len(r) >= _LARGE_RECORD:
            if start < i:
                file_handle.write(tfrecord_frames(records[start:i]))
            for part in _framed_parts([r]):
                file_handle.write(part)
            start = i + 1
    if start < len(records):
        file_handle.write(tfrecord_frames(records[start:]))


class BackgroundWriter:
    """A file handle whose writes run in order on a thread of their own.

    ``write`` queues (at most ``depth`` pending buffers, so memory stays bounded)
    and returns; the thread calls the wrapped handle's ``write`` (for a gzip
    handle: deflate, then the file system's write). The first error the thread
    meets is raised by the next ``write`` or by ``close``; after it, queued
    buffers are dropped, never written out of order. A writer dropped without
    ``close`` (Beam abandons a failed bundle's writer) ends its thread and
    closes the handle, so neither outlives it.

    Example:
        >>> import io
        >>> raw = io.BytesIO(); raw.close = lambda: None
        >>> w = BackgroundWriter(raw)
        >>> for part in (b"ab", b"cd"):
        ...     w.write(part)
        >>> w.close(); raw.getvalue()
        b'abcd'
    """

    def __init__(self, handle, depth: int = 4):
        self._handle = handle
        self._pending: queue.Queue = queue.Queue(depth)
        self._failure: List[BaseException] = []
        abandoned = threading.Event()
        # The thread holds no reference to this object, so dropping it is seen.
        self._thread = threading.Thread(
            target=_drain, args=(handle, self._pending, self._failure, abandoned),
            name="tfrecord-writer", daemon=True)
        self._thread.start()
        weakref.finalize(self, abandoned.set)

    def write(self, data: bytes) -> None:
        if self._failure:
            raise self._failure[0]
        self._pending.put(data)  # the thread drains even after a failure: never stuck

    def close(self) -> None:
        self._pending.put(None)
        self._thread.join()
        if self._failure:
            _close_quietly(self._handle)  # the write's error is the one to report
            raise self._failure[0]
        self._handle.close()


def _drain(handle, pending: queue.Queue, failure: List[BaseException],
           abandoned: threading.Event) -> None:
    while True:
        try:
            data = pending.get(timeout=0.5)
        except queue.Empty:
            if abandoned.is_set():
                break
            continue
        if data is None:  # close(): the caller closes the handle
            return
        if not failure:
            try:
                handle.write(data)
            except BaseException as e:  # noqa: BLE001  (raised in the caller's thread)
                failure.append(e)
    _close_quietly(handle)  # abandoned: nobody is left to tell, the bundle failed


def _close_quietly(handle) -> None:
    try:
        handle.close()
    except Exception:  # noqa: BLE001  (another error is, or was, the one reported)
        pass


class BatchedTFRecordSink(filebasedsink.FileBasedSink):
    """A gzip TFRecord sink whose elements are lists of serialized records."""

    def __init__(self, file_path_prefix: str):
        super().__init__(file_path_prefix=file_path_prefix,
                         coder=beam.coders.PickleCoder(),
                         file_name_suffix=RECORD_FILE_SUFFIX,
                         num_shards=0, shard_name_template=None,
                         mime_type="application/octet-stream",
                         compression_type=CompressionTypes.GZIP)

    def open(self, temp_path):
        return BackgroundWriter(super().open(temp_path))

    def write_record(self, file_handle, value: List[bytes]):
        write_frames(file_handle, value)


