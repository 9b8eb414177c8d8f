"""TFRecord files read defensively: a record file is untrusted input.

TF's own reader trusts the 8-byte length in each record header and allocates
it before reading: a 76-byte file whose header claims a terabyte crashes the
process (SIGSEGV, no message). This reader checks every header's CRC before it
believes the length, refuses a length over a limit (or past the end of an
uncompressed file) with the file and byte offset, reads records in bounded
chunks (gzip streamed, so a compressed file never expands whole in memory)
and checks each record's CRC. A file whose first header fails its checksum is
not a TFRecord file, and says so.

Paths may be URIs (read through :mod:`tfx_bridge.storage.fs`). Gzip is detected from the
file's magic bytes, not its name.

Example:
    >>> import tensorflow as tf, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "r.tfrecord")
    >>> with tf.io.TFRecordWriter(path) as w:
    ...     w.write(b"abc")
    >>> [r for batch in read_batches(path) for r in batch.records]
    [b'abc']
"""
from __future__ import annotations

import dataclasses
import struct
import zlib
from typing import Iterator, List, Optional

from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs


class RecordFileError(BridgeError):
    """A TFRecord file that is corrupt, ends early or declares an oversized record."""

# tf.Examples are rarely more than a few MB; an image or audio clip may be tens.
DEFAULT_MAX_RECORD_BYTES = 64 << 20
# A batch stops growing at this many bytes, whatever its record count.
DEFAULT_MAX_BATCH_BYTES = 64 << 20
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_HEADER = 12
_LENGTH = struct.Struct("<Q")
_LENGTH_CRC = struct.Struct("<QI")
MASK_DELTA = 0xA282EAD8  # TFRecord's CRC mask (crc rotated right by 15, plus this)


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C of ``data`` (bytes)."""
    from google_crc32c import value

    return _mask(value(data))


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


@dataclasses.dataclass
class Batch:
    first: int           # index of the batch's first record in its file
    records: List[bytes]


class _Source:
    """Bytes of a (possibly gzip) file in bounded chunks.

    ``buf[pos:]`` are the unread bytes; ``consumed`` counts uncompressed bytes
    dropped from the front of ``buf``, so a record's offset is consumed + pos.
    """

    def __init__(self, f, name: str):
        self._f = f
        self._name = name
        self.buf = b""
        self.pos = 0
        self.consumed = 0
        self._pending = f.read(_CHUNK)  # raw bytes not yet inflated
        self._raw_eof = not self._pending
        self.gzip = self._pending[:2] == _GZIP_MAGIC
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if self.gzip else None
        self._in_member = False  # a gzip member begun and not yet ended

    def _next_chunk(self) -> bytes:
        """At most about one chunk of file bytes (b"" at the end)."""
        if not self._pending:
            if not self._raw_eof:
                self._pending = self._f.read(_CHUNK)
                self._raw_eof = not self._pending
            if not self._pending:
                return self._end_of_file()
        if self._inflate is None:
            out, self._pending = self._pending, b""
            return out
        # max_length bounds what one call may expand to, so a zip bomb streams.
        self._in_member = True
        out = self._inflate.decompress(self._pending, _CHUNK)
        self._pending = self._inflate.unconsumed_tail
        if self._inflate.eof:  # concatenated gzip members
            self._pending = self._inflate.unused_data + self._pending
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            self._in_member = False
        return out

    def _end_of_file(self) -> bytes:
        """b"" where the file ends where its format says; a gzip member without its
        end (a deflate stream cut short, or no trailer with its CRC and length) is
        a truncated file, whatever record boundary the cut fell on."""
        if self._inflate is not None and self._in_member:
            rest = self._inflate.flush()
            if rest:
                return rest
            raise RecordFileError(
                f"{self._name}: the gzip stream ends before its end (no deflate end or "
                "gzip trailer; the file is truncated, records may be missing). Re-create it.")
        return b""

    def read_to_end(self) -> None:
        """Inflates the rest, keeping nothing: raises where :meth:`fill` would."""
        while self._next_chunk() or self._pending or not self._raw_eof:
            pass
        while self._end_of_file():
            pass

    def fill(self, need: int) -> bool:
        """Makes ``buf[pos:]`` hold at least ``need`` bytes; False at the end of the file."""
        parts = [self.buf[self.pos:]]
        have = len(parts[0])
        while have < need:
            chunk = self._next_chunk()
            if not chunk and self._raw_eof and not self._pending:
                break
            parts.append(chunk)
            have += len(chunk)
        self.consumed += self.pos
        self.buf, self.pos = b"".join(parts), 0
        return have >= need


def read_batches(path: str, batch_size: int = 1000,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES, shown: Optional[str] = None,
                 limit: Optional[int] = None) -> Iterator[Batch]:
    """The records of one TFRecord file (gzip or not) in batches, every header
    and record checked. ``limit`` stops after that many records.

    Raises :class:`RecordFileError` naming the file, the record index and its byte offset
    (uncompressed) for a bad checksum, a truncated record or a length over
    ``max_record_bytes``.
    """
    import tensorflow as tf

    name = shown or path
    try:
        with fs.open_file(path, "rb") as f:
            src = _Source(f, name)
            size = None if src.gzip else fs.size(path)
            yield from _Framer(src, name, size, max_record_bytes).batches(
                batch_size, max_batch_bytes, limit)
    except zlib.error as e:
        raise RecordFileError(f"{name}: gzip data is corrupt ({e}). Re-create the file.") from e
    except tf.errors.OpError as e:
        raise RecordFileError(f"{name}: cannot read ({e.message.splitlines()[0]}).") from e


def gzip_ends(path: str, inflated_bytes: int, shown: Optional[str] = None) -> None:
    """Raises :class:`RecordFileError` (the words :func:`read_batches` uses) unless
    the gzip file at ``path``, of which a reader inflated ``inflated_bytes`` bytes,
    ends where its format says: with a deflate end and a trailer. The trailer's
    length (the last 4 bytes: the member's inflated size modulo 2**32) matching
    ``inflated_bytes`` decides it without reading the file again; otherwise (a
    file of concatenated gzip members, or one that ends early) the whole file is
    inflated once more, without framing, to find out."""
    import tensorflow as tf

    name = shown or path
    try:
        tail = fs.read_tail(path, 4)
        if len(tail) == 4 and struct.unpack("<I", tail)[0] == inflated_bytes % (1 << 32):
            return
        with fs.open_file(path, "rb") as f:
            _Source(f, name).read_to_end()
    except zlib.error as e:
        raise RecordFileError(f"{name}: gzip data is corrupt ({e}). Re-create the file.") from e
    except tf.errors.OpError as e:
        raise RecordFileError(f"{name}: cannot read ({e.message.splitlines()[0]}).") from e


class _Framer:
    """Records out of a :class:`_Source`, checked.

    Fast path: the whole records already in the buffer are found by their
    lengths alone (bounded by the buffer and ``max_record_bytes``, so a
    forged length moves nothing outside memory already held), then checked
    together: both CRCs of each, computed in C and masked with numpy, before any
    record leaves. A bad header anywhere is caught there, before the records
    after it (found through its length) are used. Slow path, for a record that
    reaches past the buffer or over the limit: its header CRC checked first,
    then its length against the limit and the file, then the buffer filled.
    """

    def __init__(self, src: _Source, name: str, size: Optional[int], max_record_bytes: int):
        self.src, self.name, self.size = src, name, size
        self.max_record_bytes = max_record_bytes

    def batches(self, batch_size: int, max_batch_bytes: int,
                limit: Optional[int]) -> Iterator[Batch]:
        batch: List[bytes] = []
        first = index = held = 0
        while limit is None or index < limit:
            want = batch_size - len(batch)
            if limit is not None:
                want = min(want, limit - index)
            records = self._whole_records(want, max_batch_bytes - held, index)
            if not records:
                record = self._one_record(index)
                if record is None:
                    break
                records = [record]
            batch.extend(records)
            index += len(records)
            held += sum(map(len, records))
            if len(batch) >= batch_size or held >= max_batch_bytes:
                yield Batch(first, batch)
                batch, first, held = [], index, 0
        if batch:
            yield Batch(first, batch)

    def _whole_records(self, want: int, room: int, index: int) -> List[bytes]:
        """Up to ``want`` records (and about ``room`` bytes) lying whole in the buffer."""
        src = self.src
        buf, pos = src.buf, src.pos
        end_of_buf, limit = len(buf), self.max_record_bytes
        unpack = _LENGTH.unpack_from
        starts: List[int] = []
        lengths: List[int] = []
        while len(starts) < want and pos + _HEADER <= end_of_buf:
            length = unpack(buf, pos)[0]
            end = pos + _HEADER + length + 4
            if end > end_of_buf or length > limit:
                break
            starts.append(pos)
            lengths.append(length)
            pos = end
            room -= length
            if room <= 0:
                break
        if not starts:
            return []
        records = self._checked(buf, starts, lengths, index)
        src.pos = pos
        return records

    def _checked(self, buf: bytes, starts: List[int], lengths: List[int],
                 index: int) -> List[bytes]:
        import numpy as np
        from google_crc32c import value as crc32c

        n = len(starts)
        at = np.array(starts, np.int64)
        sizes = np.array(lengths, np.uint64)
        four = np.arange(4)
        view = np.frombuffer(buf, np.uint8)
        stored_headers = view[(at + 8)[:, None] + four].view("<u4").ravel()
        stored_data = view[(at + _HEADER + sizes.astype(np.int64))[:, None] + four
                           ].view("<u4").ravel()
        # A header's CRC depends on its length alone: computed once per distinct length.
        distinct, which = np.unique(sizes, return_inverse=True)
        headers = np.fromiter(map(crc32c, [_LENGTH.pack(int(v)) for v in distinct]),
                              np.uint32, len(distinct))[which]
        records = [buf[p + _HEADER:p + _HEADER + length]
                   for p, length in zip(starts, lengths, strict=True)]
        data = np.fromiter(map(crc32c, records), np.uint32, n)
        bad_header = masked_crcs(headers) != stored_headers
        bad = np.flatnonzero(bad_header | (masked_crcs(data) != stored_data))
        if bad.size:
            i = int(bad[0])
            where = self.src.consumed + starts[i]
            if bad_header[i]:
                raise RecordFileError(_bad_header(self.name, index + i, where, self.src.gzip))
            raise RecordFileError(_bad_data(self.name, index + i, where))
        return records

    def _one_record(self, index: int) -> Optional[bytes]:
        """The next record, checked one step at a time; None at the end of the file."""
        from google_crc32c import value as crc32c

        src, name = self.src, self.name
        if len(src.buf) - src.pos < _HEADER and not src.fill(_HEADER):
            if len(src.buf) == src.pos:
                return None
            raise RecordFileError(
                f"{name}, record {index} at byte {src.consumed + src.pos}: the file "
                "ends inside a record header (truncated). Re-create it.")
        buf, pos = src.buf, src.pos
        length, crc = _LENGTH_CRC.unpack_from(buf, pos)
        if _mask(crc32c(buf[pos:pos + 8])) != crc:
            raise RecordFileError(_bad_header(name, index, src.consumed + pos, src.gzip))
        end = pos + _HEADER + length + 4
        if length > self.max_record_bytes or (self.size is not None
                                              and src.consumed + end > self.size):
            raise RecordFileError(_bad_length(name, index, src.consumed + pos,
                                              length, self.max_record_bytes, self.size))
        if end > len(buf):
            if not src.fill(end - pos):
                raise RecordFileError(
                    f"{name}, record {index} at byte {src.consumed + src.pos}: the "
                    "file ends inside the record (truncated). Re-create it.")
            buf, pos = src.buf, src.pos
            end = pos + _HEADER + length + 4
        data = buf[pos + _HEADER:end - 4]
        if _mask(crc32c(data)) != struct.unpack_from("<I", buf, end - 4)[0]:
            raise RecordFileError(_bad_data(name, index, src.consumed + pos))
        src.pos = end
        return data


def masked_crcs(crcs):
    """TFRecord's mask of many CRC32Cs at once (a uint32 array; its arithmetic wraps
    as the mask does)."""
    import numpy as np

    return ((crcs >> np.uint32(15)) | (crcs << np.uint32(17))) + np.uint32(MASK_DELTA)


def _bad_data(name: str, index: int, at: int) -> str:
    return (f"{name}, record {index} at byte {at}: the record's data fails its checksum "
            "(corrupt). Re-create it.")


def _bad_header(name: str, index: int, at: int, gzip: bool) -> str:
    where = f"{name}, record {index} at byte {at}"
    if index == 0:
        what = "gzip data that is not TFRecords" if gzip else "not a TFRecord file"
        return (f"{where}: the first record header fails its checksum: {what}. Give "
                "TFRecord files (gzip or not) as TFX writes them.")
    return f"{where}: a record header fails its checksum (corrupt). Re-create the file."


def _bad_length(name: str, index: int, at: int, length: int, limit: int,
                size: Optional[int]) -> str:
    where = f"{name}, record {index} at byte {at}"
    if length > limit:
        return (f"{where}: the record claims {length} bytes, over the limit of {limit} bytes. "
                "A corrupt or hostile header; if records this large are real, raise the limit "
                "(max_record_bytes / --max-record-mb).")
    return (f"{where}: the record claims {length} bytes but the file has "
            f"{size - at - _HEADER} left (truncated or corrupt). Re-create the file.")
