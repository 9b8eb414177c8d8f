"""tfx_bridge.torch.decode: both framings give the same checked columns, and every
refusal names the file, record, feature and value."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from tfx_bridge.errors import BridgeError
from tfx_bridge.torch.decode import (
    ExamplesReadError,
    cast,
    defensive_chunks,
    inexact_ints,
    tf_chunks,
)
from tfx_bridge.torch.examples import Feature


def _write(path, records, gzip=True):
    import tensorflow as tf

    opts = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
    with tf.io.TFRecordWriter(path, opts) as w:
        for rec in records:
            feature = {}
            for name, values in rec.items():
                if isinstance(values[0], float):
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
                else:
                    feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
            w.write(tf.train.Example(features=tf.train.Features(feature=feature))
                    .SerializeToString())
    return path


def _read_all(chunks):
    out = [decode() for _, _, decode in chunks]
    return {k: np.concatenate([c[k] for c in out]) for k in out[0]}


FEATURES = {"id": Feature("int32"), "x": Feature("float32", length=2)}
RECORDS = [{"id": [i], "x": [i * 0.5, -1.0]} for i in range(5)]


@pytest.mark.parametrize("gzip", [True, False])
def test_chunks_defensive_and_tf_framing_give_the_same_columns(tmp_path, gzip):
    path = _write(str(tmp_path / "d.tfrecord"), RECORDS, gzip)
    defensive = _read_all(defensive_chunks(path, FEATURES, 2, 1 << 20))
    by_tf = _read_all(tf_chunks(path, FEATURES, 2))
    assert defensive["id"].dtype == np.int32 and defensive["id"].tolist() == [0, 1, 2, 3, 4]
    assert defensive["x"].shape == (5, 2) and defensive["x"][:, 0].tolist() == [
        0.0, 0.5, 1.0, 1.5, 2.0]
    for name in FEATURES:
        np.testing.assert_array_equal(defensive[name], by_tf[name])


def test_chunks_share_splits_chunks_between_readers(tmp_path):
    path = _write(str(tmp_path / "d.gz"), RECORDS)
    for chunks in (lambda s: defensive_chunks(path, FEATURES, 2, 1 << 20, s),
                   lambda s: tf_chunks(path, FEATURES, 2, s)):
        firsts = [[first for first, _, _ in chunks((i, 2))] for i in range(2)]
        assert firsts == [[0, 4], [2]]


@pytest.mark.parametrize("reader", ["defensive", "tf"])
def test_chunks_wrong_value_count_names_record_and_feature(tmp_path, reader):
    records = RECORDS[:3] + [{"id": [3], "x": [1.0]}]
    path = _write(str(tmp_path / "d.gz"), records)
    chunks = (defensive_chunks(path, FEATURES, 10, 1 << 20) if reader == "defensive"
              else tf_chunks(path, FEATURES, 10))
    with pytest.raises(ExamplesReadError, match=r"record 3: feature 'x' has 1 values, expected 2"):
        _read_all(chunks)


def test_tf_chunks_truncated_file_is_refused_naming_the_file(tmp_path):
    path = _write(str(tmp_path / "d.tfrecord"), RECORDS, gzip=False)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-7])
    with pytest.raises(ExamplesReadError, match=r"d\.tfrecord: a corrupt record"):
        _read_all(tf_chunks(path, FEATURES, 10))


def test_cast_narrower_int_in_range_gives_a_copy():
    values = np.array([1, -2], np.int64)
    out = cast("id", "int16", values, "f.gz", 0)
    assert out.dtype == np.int16 and out.tolist() == [1, -2]
    out[0] = 9
    assert values[0] == 1


@pytest.mark.parametrize("dtype,values,match", [
    ("int64", np.array([1.5], np.float32), r"'v' holds floats; declared int64"),
    ("int32", np.array([0, 2**31], np.int64),
     r"record 11: feature 'v' = 2147483648 does not fit int32"),
    ("bool", np.array([0, 1, 2], np.int64),
     r"record 12: feature 'v' = 2 does not fit bool \[0, 1\]"),
    ("float32", np.array([2**24 + 1], np.int64),
     r"record 10: feature 'v' = 16777217 is not exactly a float32"),
])
def test_cast_value_that_would_change_is_refused(dtype, values, match):
    with pytest.raises(ExamplesReadError, match=match):
        cast("v", dtype, values, "f.gz", 10)


def test_inexact_ints_finds_only_changed_values():
    values = np.array([2**24, 2**24 + 1, -(2**24 + 3), 2**60 + 1, 2**60], np.int64)
    assert inexact_ints(values, values.astype(np.float32)).tolist() == [1, 2, 3]
    assert inexact_ints(values[:1], values[:1].astype(np.float64)).tolist() == []


def _chunks(reader, path, chunk_records=2, share=(0, 1)):
    if reader == "defensive":
        return defensive_chunks(path, FEATURES, chunk_records, 1 << 20, share)
    return tf_chunks(path, FEATURES, chunk_records, share)


def _gzip_members(path, members) -> str:
    """A gzip file of ``members`` (each a list of records, framed as TF frames them),
    one gzip member each, as `cat a.gz b.gz` makes."""
    import gzip
    import tempfile

    data = b""
    for records in members:
        plain = _write(tempfile.mktemp(dir=os.path.dirname(path)), records, gzip=False)
        data += gzip.compress(open(plain, "rb").read())
    open(path, "wb").write(data)
    return path


@pytest.mark.parametrize("reader", ["defensive", "tf"])
@pytest.mark.parametrize("how", ["after_a_flush", "without_the_trailer"])
@pytest.mark.parametrize("share", [(0, 1), (0, 2), (1, 2)])
def test_chunks_gzip_stream_that_stops_before_its_end_refused_by_both_readers(
        tmp_path, reader, how, share):
    import zlib

    plain = _write(str(tmp_path / "plain"), RECORDS * 3, gzip=False)
    data = open(plain, "rb").read()
    deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    if how == "after_a_flush":  # every record inflates; no final block, no trailer
        cut = deflate.compress(data) + deflate.flush(zlib.Z_SYNC_FLUSH)
    else:
        cut = (deflate.compress(data) + deflate.flush())[:-8]
    path = tmp_path / "cut.gz"
    path.write_bytes(cut)
    with pytest.raises(BridgeError, match=r"cut\.gz: the gzip stream ends before its end "
                       r".*truncated, records may be missing"):
        _read_all(_chunks(reader, str(path), share=share))


@pytest.mark.parametrize("reader", ["defensive", "tf"])
def test_chunks_concatenated_gzip_members_read_whole_by_both_readers(tmp_path, reader):
    path = _gzip_members(str(tmp_path / "two.gz"), [RECORDS[:3], RECORDS[3:]])
    assert _read_all(_chunks(reader, path))["id"].tolist() == [0, 1, 2, 3, 4]


def test_chunks_wrong_wire_type_in_one_record_named_alike_by_both_readers(tmp_path):
    records = [dict(r) for r in RECORDS * 4]
    records[5] = {"id": [5.0], "x": [0.5, -1.0]}  # a float list where int64 is declared
    path = _write(str(tmp_path / "d.gz"), records)
    said = {}
    for reader in ("defensive", "tf"):
        with pytest.raises(ExamplesReadError) as e:
            _read_all(_chunks(reader, path, chunk_records=8))
        said[reader] = str(e.value)
    assert said["defensive"] == said["tf"], said
    assert "d.gz, record 5: not a tf.Example of the declared types" in said["tf"], said


def _report_freeze(queue):
    from tfx_bridge.torch import forks

    queue.put((gc.get_freeze_count() > 0, forks.forked_after_tf()))


def test_fork_after_tf_ran_child_frozen_parent_left_as_it_was():
    import multiprocessing

    import tensorflow as tf

    (tf.constant(1) + 1).numpy()  # TF's runtime has started here
    assert gc.get_freeze_count() == 0
    context = multiprocessing.get_context("fork")
    queue = context.SimpleQueue()
    child = context.Process(target=_report_freeze, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and queue.get() == (True, True)
    assert gc.get_freeze_count() == 0  # the parent collects as before
