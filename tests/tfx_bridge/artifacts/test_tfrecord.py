"""tfx_bridge.artifacts.tfrecord: untrusted record files are refused with file and offset."""
from __future__ import annotations

import gzip
import struct
import zlib

import pytest
import tensorflow as tf

from tfx_bridge.artifacts import tfrecord
from tfx_bridge.artifacts.tfrecord import RecordFileError


def _write(path, records, compression=""):
    with tf.io.TFRecordWriter(str(path), compression) as w:
        for r in records:
            w.write(r)
    return str(path)


def _frame(data: bytes, length=None) -> bytes:
    """One record framed by hand; ``length`` forges the header (with a valid CRC)."""
    head = struct.pack("<Q", len(data) if length is None else length)
    return (head + struct.pack("<I", tfrecord.masked_crc(head)) + data
            + struct.pack("<I", tfrecord.masked_crc(data)))


def _all(path, **kw):
    return [r for b in tfrecord.read_batches(path, **kw) for r in b.records]


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_read_batches_matches_tf_reader(tmp_path, compression):
    records = [bytes([i % 256]) * (i * 37 % 3000) for i in range(500)]
    path = _write(tmp_path / "r", records, compression)
    batches = list(tfrecord.read_batches(path, batch_size=64))
    assert [b.first for b in batches] == list(range(0, 500, 64))
    assert [r for b in batches for r in b.records] == records
    assert _all(path, limit=7) == records[:7]


def test_read_batches_concatenated_gzip_members_read_whole(tmp_path):
    path = tmp_path / "two.gz"
    path.write_bytes(gzip.compress(_frame(b"a")) + gzip.compress(_frame(b"bc")))
    assert _all(str(path)) == [b"a", b"bc"]


def test_read_batches_forged_terabyte_header_refused_with_offset(tmp_path):
    # 76 bytes: one good record, then a header (valid CRC) claiming a terabyte.
    path = tmp_path / "forged.tfrecord"
    good = _frame(b"x" * 40)
    path.write_bytes(good + _frame(b"", length=1 << 40)[:12] + b"\0" * (76 - len(good) - 12))
    assert path.stat().st_size == 76
    with pytest.raises(RecordFileError, match=rf"forged\.tfrecord, record 1 at byte {len(good)}: "
                       r"the record claims 1099511627776 bytes, over the limit"):
        _all(str(path))


def test_read_batches_length_past_end_of_file_refused(tmp_path):
    path = tmp_path / "short.tfrecord"
    path.write_bytes(_frame(b"y" * 100, length=5000))  # 116 bytes
    with pytest.raises(RecordFileError, match=r"record 0 at byte 0: the record claims 5000 bytes "
                       r"but the file has 104 left"):
        _all(str(path))


def test_read_batches_gzip_record_over_limit_refused_before_reading(tmp_path):
    path = _write(tmp_path / "big.gz", [b"s" * 10, b"b" * 5000], "GZIP")
    with pytest.raises(RecordFileError, match=r"record 1 at byte 26: the record claims 5000 bytes, "
                       r"over the limit of 4096 bytes.*raise the limit"):
        _all(path, max_record_bytes=4096)


def test_read_batches_not_tfrecords_refused(tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_bytes(b"just some text that is long enough to hold a header")
    with pytest.raises(RecordFileError, match=r"notes\.txt, record 0 at byte 0: the first record "
                       r"header fails its checksum: not a TFRecord file"):
        _all(str(plain))
    zipped = tmp_path / "notes.gz"
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    with pytest.raises(RecordFileError, match=r"gzip data that is not TFRecords"):
        _all(str(zipped))
    broken = tmp_path / "broken.gz"
    broken.write_bytes(b"\x1f\x8b" + b"\0" * 30)
    with pytest.raises(RecordFileError, match=r"broken\.gz: gzip data is corrupt"):
        _all(str(broken))


def test_read_batches_flipped_data_byte_refused(tmp_path):
    raw = bytearray(_frame(b"hello") + _frame(b"world"))
    raw[12 + 5 + 4 + 12 + 1] ^= 1  # a byte of the second record's data
    path = tmp_path / "flip.tfrecord"
    path.write_bytes(bytes(raw))
    with pytest.raises(RecordFileError, match=r"record 1 at byte 21: the record's data fails its "
                       r"checksum"):
        _all(str(path))


def test_read_batches_truncated_inside_record_refused(tmp_path):
    path = tmp_path / "cut.gz"
    path.write_bytes(gzip.compress(_frame(b"z" * 300)[:100]))
    with pytest.raises(RecordFileError,
                       match=r"record 0 at byte 0: the file ends inside the record"):
        _all(str(path))


def test_read_batches_bytes_per_batch_bounded(tmp_path):
    path = _write(tmp_path / "r", [b"q" * 1000] * 10)
    batches = list(tfrecord.read_batches(path, batch_size=100, max_batch_bytes=2500))
    assert [len(b.records) for b in batches] == [3, 3, 3, 1]


def _gzip_cut_at_a_record_boundary(path, records, keep: int) -> str:
    """A gzip TFRecord file cut inside its deflate stream exactly after ``keep``
    records (a full flush there makes that a clean cut of the inflated bytes)."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # wbits 31: gzip framing
    data = b""
    for i, record in enumerate(records):
        data += deflate.compress(_frame(record))
        if i + 1 == keep:
            data += deflate.flush(zlib.Z_FULL_FLUSH)
            cut = len(data)
    data += deflate.flush()
    with open(path, "wb") as f:
        f.write(data[:cut])
    return str(path)


@pytest.mark.parametrize("how", ["inside_the_deflate_stream", "without_the_trailer"])
def test_read_batches_gzip_ending_early_refused_not_read_short(tmp_path, how):
    records = [b"r%04d" % i * 20 for i in range(2024)]
    if how == "without_the_trailer":
        full = _write(tmp_path / "full.gz", records, "GZIP")
        with open(full, "rb") as f:
            data = f.read()
        path = tmp_path / "cut.gz"
        path.write_bytes(data[:-8])  # CRC32 and length gone
        path = str(path)
    else:
        path = _gzip_cut_at_a_record_boundary(tmp_path / "cut.gz", records, keep=2023)
    with pytest.raises(RecordFileError, match=r"cut\.gz: the gzip stream ends before its "
                       r"end .*truncated, records may be missing"):
        _all(path)
    with pytest.raises(EOFError):  # as Python's own gzip says
        gzip.decompress(open(path, "rb").read())



@pytest.mark.parametrize("compress", [False, True])
def test_read_batches_header_flipped_mid_buffer_named_before_its_length_is_used(
        tmp_path, compress):
    raw = bytearray(b"".join(_frame(bytes([i]) * 5) for i in range(40)))
    raw[21 * 7] ^= 0x40  # record 7's length: 5 -> 69, its CRC left as it was
    path = tmp_path / "flip"
    path.write_bytes(gzip.compress(bytes(raw)) if compress else bytes(raw))
    with pytest.raises(RecordFileError,
                       match=r"record 7 at byte 147: a record header fails its checksum"):
        _all(str(path), batch_size=16)
