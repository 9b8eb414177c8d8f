"""The reader on record shapes beyond the demo's: int64 ids beside int32 ones, float
lists, 0/1 labels, many narrow features, bytes features left unread. Values equal
``tf.io.parse_example``'s; TF's reader framing and parsing in parts of a chunk
names the same records as reading the chunk whole."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402

from tfx_bridge.torch import decode  # noqa: E402
from tfx_bridge.torch.examples import ExamplesDataset, ExamplesReadError, Feature  # noqa: E402

HELDOUT = {"user_id": Feature("int64"), "item_id": Feature("int32"),
           "price": Feature("float32"), "embedding": Feature("float32", 4),
           "clicked": Feature("float32", wire="int64")}


def _record(i: int, item_id: int | None = None, embedding: int = 4) -> bytes:
    f = tf.train.Feature
    return tf.train.Example(features=tf.train.Features(feature={
        "user_id": f(int64_list=tf.train.Int64List(value=[2**40 + 7 * i])),
        "item_id": f(int64_list=tf.train.Int64List(value=[i if item_id is None else item_id])),
        "price": f(float_list=tf.train.FloatList(value=[i / 8])),
        "embedding": f(float_list=tf.train.FloatList(value=[i, -i, i / 2, 1.0][:embedding])),
        "clicked": f(int64_list=tf.train.Int64List(value=[i % 2])),
        "country": f(bytes_list=tf.train.BytesList(value=[b"de", b"fr"])),
        **{f"f{k}": f(float_list=tf.train.FloatList(value=[i + k / 10])) for k in range(6)},
    })).SerializeToString()


def _write(root, records) -> str:
    folder = root / "Split-train"
    folder.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(folder / "d.gz"), "GZIP") as w:
        for r in records:
            w.write(r)
    return str(root)


def _expected(records, features):
    spec = {k: tf.io.FixedLenFeature([f.length], tf.float32 if f.wire == "float32"
                                     else tf.int64) for k, f in features.items()}
    parsed = tf.io.parse_example(tf.constant(records), spec)
    return {k: v.numpy().astype(features[k].dtype).reshape(
        (-1, features[k].length) if features[k].length > 1 else (-1,))
        for k, v in parsed.items()}


def _concat(batches):
    return {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


@pytest.mark.parametrize("reader", ["tf", "defensive"])
def test_reader_heldout_schema_values_equal_parse_example(tmp_path, monkeypatch, reader):
    monkeypatch.setattr(decode, "PART_RECORDS", 3)  # chunks of 6 parsed in 2 parts
    records = [_record(i) for i in range(20)]
    ds = ExamplesDataset(_write(tmp_path, records), "train", HELDOUT, batch_size=4,
                         chunk_records=6, reader=reader)
    batches = list(ds)
    got, want = _concat(batches), _expected(records, HELDOUT)
    assert [len(b["price"]) for b in batches] == [4] * 5
    assert list(batches[0]) == list(HELDOUT)
    for name in HELDOUT:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
        np.testing.assert_array_equal(got[name], want[name])
    assert got["user_id"][3] == 2**40 + 21


def test_reader_many_narrow_features_batches_are_separate_writable_tensors(tmp_path):
    records = [_record(i) for i in range(10)]
    features = {f"f{k}": Feature("float32") for k in range(6)}
    batches = list(ExamplesDataset(_write(tmp_path, records), "train", features,
                                   batch_size=4, reader="tf"))
    np.testing.assert_array_equal(_concat(batches)["f5"], _expected(records, features)["f5"])
    first = batches[0]
    assert first["f0"].is_contiguous() and first["f0"].shape == (4,)
    first["f0"][0] = 99.0
    assert first["f1"].tolist() == pytest.approx([0.1, 1.1, 2.1, 3.1])
    assert batches[1]["f0"][0] == 4.0


@pytest.mark.parametrize("part", [2, 1024])
def test_tf_chunks_parts_and_shares_give_whole_chunks(tmp_path, monkeypatch, part):
    monkeypatch.setattr(decode, "PART_RECORDS", part)
    records = [_record(i) for i in range(11)]
    path = _write(tmp_path, records) + "/Split-train/d.gz"
    for share, firsts in (((0, 1), [0, 4, 8]), ((0, 2), [0, 8]), ((1, 2), [4])):
        chunks = [(first, n, decode()) for first, n, decode in
                  decode.tf_chunks(path, HELDOUT, 4, share)]
        assert [first for first, _, _ in chunks] == firsts
        for first, n, arrays in chunks:
            assert n == len(arrays["price"]) == min(4, 11 - first)
            assert arrays["price"].tolist() == [i / 8 for i in range(first, first + n)]


@pytest.mark.parametrize("reader", ["tf", "defensive"])
def test_reader_int32_overflow_in_a_later_part_refused_naming_feature_and_record(
        tmp_path, monkeypatch, reader):
    monkeypatch.setattr(decode, "PART_RECORDS", 2)
    records = [_record(i, item_id=2**31 if i == 7 else None) for i in range(10)]
    ds = ExamplesDataset(_write(tmp_path, records), "train", HELDOUT, batch_size=2,
                         chunk_records=4, reader=reader)
    with pytest.raises(ExamplesReadError,
                       match=r"d\.gz, record 7: feature 'item_id' = 2147483648 does not fit int32"):
        list(ds)


def test_reader_tf_wrong_list_length_in_a_later_part_refused_naming_record(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(decode, "PART_RECORDS", 2)
    records = [_record(i, embedding=3 if i == 6 else 4) for i in range(10)]
    ds = ExamplesDataset(_write(tmp_path, records), "train", HELDOUT, batch_size=2,
                         chunk_records=4, reader="tf")
    with pytest.raises(ExamplesReadError,
                       match=r"record 6: feature 'embedding' has 3 values, expected 4"):
        list(ds)


def test_part_records_divides_the_chunk_or_is_the_whole_chunk(monkeypatch):
    monkeypatch.setattr(decode, "PART_RECORDS", 1024)
    assert [decode.part_records(c) for c in (8192, 3000, 1000, 10)] == [1024, 1000, 1000, 10]
    assert decode.part_records(8191) == 8191  # prime: no part divides it
