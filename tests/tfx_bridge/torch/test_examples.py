"""The PyTorch reader of TFX Examples: dtypes, lists, shuffling, workers, refusals."""
from __future__ import annotations

import gc
import os
import re

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402

from tfx_bridge.torch.examples import (  # noqa: E402
    ExamplesDataset,
    ExamplesReadError,
    Feature,
    features_from_schema,
)


def _example(i: int, item: int, vec_len: int = 3) -> bytes:
    f = tf.train.Feature
    return tf.train.Example(features=tf.train.Features(feature={
        "item_id": f(int64_list=tf.train.Int64List(value=[item])),
        "price": f(float_list=tf.train.FloatList(value=[i / 4])),
        "vec": f(float_list=tf.train.FloatList(value=[i, i + 1, i + 2][:vec_len])),
        "label": f(int64_list=tf.train.Int64List(value=[i % 2])),
        "country": f(bytes_list=tf.train.BytesList(value=[b"de"])),
    })).SerializeToString()


def _write(root, split="train", files=2, per_file=50, item=lambda i: i, broken=None):
    folder = os.path.join(root, f"Split-{split}")
    os.makedirs(folder, exist_ok=True)
    opts = tf.io.TFRecordOptions(compression_type="GZIP")
    for k in range(files):
        with tf.io.TFRecordWriter(os.path.join(folder, f"data-{k:05d}.gz"), opts) as w:
            for j in range(per_file):
                i = k * per_file + j
                w.write(_example(i, item(i), 2 if i == broken else 3))
    return str(root)


FEATURES = {"item_id": Feature("int32"), "price": Feature("float32"),
            "vec": Feature("float32", 3), "label": Feature("float32", wire="int64")}


def _ids(batches):
    return [int(round(v * 4)) for b in batches for v in b["price"].tolist()]


def test_reader_dtypes_and_fixed_lists_become_typed_tensors(tmp_path):
    ds = ExamplesDataset(_write(tmp_path), "train", FEATURES, batch_size=32)
    batches = list(ds)
    assert [len(b["price"]) for b in batches] == [32, 32, 32, 4]
    first = batches[0]
    assert first["item_id"].dtype == torch.int32 and first["price"].dtype == torch.float32
    assert first["vec"].shape == (32, 3) and first["label"].dtype == torch.float32
    assert first["vec"][5].tolist() == [5.0, 6.0, 7.0]
    assert _ids(batches) == list(range(100))
    assert set(first) == set(FEATURES)


def test_reader_int64_out_of_int32_range_refused_naming_feature_file_record(tmp_path):
    root = _write(tmp_path, item=lambda i: 3_000_000_000 if i == 57 else i)
    with pytest.raises(ExamplesReadError, match=r"data-00001\.gz, record 7: feature 'item_id' "
                       r"= 3000000000 does not fit int32"):
        list(ExamplesDataset(root, "train", FEATURES))
    with pytest.raises(ExamplesReadError, match=r"data-00000\.gz, record 2: feature 'item_id' = 2 "
                       r"does not fit bool \[0, 1\]"):
        list(ExamplesDataset(root, "train", {"item_id": Feature("bool")}))
    # Declared int64, the same data reads.
    ok = dict(FEATURES, item_id=Feature("int64"))
    assert max(int(b["item_id"].max()) for b in ExamplesDataset(root, "train", ok)) == 3e9


@pytest.mark.parametrize("dtype, value, becomes", [
    ("float32", 2**24 + 1, "16777216.0"),
    ("float32", -(2**31) - 1, "-2147483648.0"),
    ("float64", 2**53 + 1, "9007199254740992.0"),
    ("float64", 2**63 - 1, "9.223372036854776e+18"),
])
def test_reader_int64_not_exactly_a_float_refused_naming_feature_and_record(tmp_path, dtype,
                                                                           value, becomes):
    root = _write(tmp_path, item=lambda i: value if i == 57 else i)
    with pytest.raises(ExamplesReadError, match=re.escape(
            f"data-00001.gz, record 7: feature 'item_id' = {value} is not exactly a {dtype} "
            f"(it would become {becomes};")):
        list(ExamplesDataset(root, "train",
                            dict(FEATURES, item_id=Feature(dtype, wire="int64"))))


def test_reader_int64_exact_as_float_reads(tmp_path):
    # Up to 2**24 every int is a float32; above, the even powers and their multiples are.
    big = [2**24, -(2**24), 2**30, 2**40 + 2**20]
    root = _write(tmp_path, item=lambda i: big[i // 10 % 4] if i % 10 == 0 else i)
    features = dict(FEATURES, item_id=Feature("float32", wire="int64"))
    got = [v for b in ExamplesDataset(root, "train", features) for v in b["item_id"].tolist()]
    assert set(big) <= set(got)


def test_reader_wrong_list_length_refused_naming_record(tmp_path):
    root = _write(tmp_path, broken=12)
    with pytest.raises(ExamplesReadError, match=r"data-00000\.gz, record 12: feature 'vec' has "
                       r"2 values, expected 3"):
        list(ExamplesDataset(root, "train", FEATURES))


def test_reader_missing_feature_and_strings_refused_by_name(tmp_path):
    root = _write(tmp_path)
    with pytest.raises(ExamplesReadError, match=r"feature 'nope' has 0 values, expected 1"):
        list(ExamplesDataset(root, "train", {"nope": Feature("float32")}))
    with pytest.raises(ExamplesReadError, match=r"no split 'eval' \(splits: \['train'\]\)"):
        ExamplesDataset(root, "eval", FEATURES)
    from tensorflow_metadata.proto.v0 import schema_pb2
    schema = schema_pb2.Schema()
    schema.feature.add(name="country", type=schema_pb2.BYTES)
    schema.feature.add(name="free", type=schema_pb2.FLOAT)
    with pytest.raises(ExamplesReadError, match=r"'country' holds strings.*'free' has no fixed"):
        features_from_schema(schema)


def test_reader_seeded_shuffle_repeats_and_covers_every_record_once(tmp_path):
    root = _write(tmp_path, files=3, per_file=40)

    def order(seed, epoch=0):
        ds = ExamplesDataset(root, "train", FEATURES, batch_size=16, shuffle=True, seed=seed,
                             chunk_records=32)
        ds.set_epoch(epoch)
        return _ids(ds)

    a = order(1)
    assert a == order(1) and sorted(a) == list(range(120))
    assert a != list(range(120)) and a != order(2) and a != order(1, epoch=1)


def _write_layout(root, layout) -> str:
    """The records ``0..n-1`` as a runner might lay them out: files of given ids."""
    os.makedirs(os.path.join(root, "Split-train"))
    for k, ids in enumerate(layout):
        with tf.io.TFRecordWriter(os.path.join(root, "Split-train", f"part-{k}.gz"),
                                  tf.io.TFRecordOptions(compression_type="GZIP")) as w:
            for i in ids:
                w.write(_example(int(i), int(i)))
    return str(root)


def test_reader_shuffle_same_records_in_another_file_layout_same_order_and_shards(tmp_path):
    import numpy as np

    perm = np.random.default_rng(5).permutation(120)
    one = _write_layout(tmp_path / "one", [range(120)])  # the DirectRunner's one file
    three = _write_layout(tmp_path / "three", [perm[:50], perm[50:70], perm[70:]])

    def epochs(root, shard=(0, 1)):
        ds = ExamplesDataset(root, "train", FEATURES, batch_size=16, shuffle=True, seed=4,
                             chunk_records=32, shard=shard)
        out = []
        for epoch in range(2):
            ds.set_epoch(epoch)
            out.append(_ids(ds))
        return out

    assert epochs(one) == epochs(three)
    halves = [epochs(one, (0, 2)), epochs(three, (1, 2))]
    assert halves[0] == epochs(three, (0, 2)) and halves[0][0] and halves[1][0]
    for epoch in range(2):  # each record read once per epoch across the two ranks
        assert sorted(halves[0][epoch] + halves[1][epoch]) == list(range(120))


def test_reader_shuffle_over_memory_bytes_streams_every_record_once_and_warns(tmp_path, caplog):
    root = _write_layout(tmp_path / "d", [range(60), range(60, 120)])
    ds = ExamplesDataset(root, "train", FEATURES, batch_size=16, shuffle=True,
                         chunk_records=32, memory_bytes=200)
    with caplog.at_level("WARNING"):
        assert sorted(_ids(ds)) == list(range(120))
    assert "are over memory_bytes=200 a reader: shuffling by files and chunks" in caplog.text
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context="fork", timeout=120)
    assert sorted(_ids(loader)) == list(range(120))


@pytest.mark.parametrize("files", [3, 1])  # by files, and by chunks when fewer files
@pytest.mark.parametrize("shuffle", [False, True])  # and by content
def test_reader_dataloader_workers_split_records_exactly_once(tmp_path, files, shuffle):
    root = _write(tmp_path, files=files, per_file=120 // files)
    ds = ExamplesDataset(root, "train", FEATURES, batch_size=10, chunk_records=20,
                         shuffle=shuffle)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context="fork", timeout=120)
    assert sorted(_ids(loader)) == list(range(120))
    for reader in ("defensive", "tf"):  # one file: each reader keeps its own chunks
        halves = [_ids(ExamplesDataset(root, "train", FEATURES, batch_size=10,
                                       chunk_records=20, shard=(i, 2), shuffle=shuffle,
                                       reader=reader)) for i in range(2)]
        assert sorted(halves[0] + halves[1]) == list(range(120)) and all(halves)


def test_reader_dataloader_worker_batches_arrive_as_plain_tensors_by_value(tmp_path):
    root = _write(tmp_path, files=1, per_file=50)
    features = {**FEATURES, "label": Feature("float64", wire="int64")}
    # The defensive reader: a forked worker must not run TF's runtime, which this
    # process may have started (both readers send batches the same way).
    ds = ExamplesDataset(root, "train", features, batch_size=16, chunk_records=32,
                         reader="defensive")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context="fork", timeout=120)
    batches = list(loader)
    assert sorted(_ids(batches)) == list(range(50))
    assert {type(b) for b in batches} == {dict}
    for b in batches:
        # Copied through the worker's pipe, not a shared-memory segment per batch;
        # writable, with the declared dtypes.
        assert not any(t.is_shared() for t in b.values())
        assert b["label"].dtype == torch.float64 and b["item_id"].dtype == torch.int32
        assert b["vec"].shape[1:] == (3,)
        b["item_id"] += 1


def test_features_from_schema_fixed_shapes_with_dtype_overrides():
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2
    schema = text_format.Parse("""
        feature { name: "item_id" type: INT shape { dim { size: 1 } } }
        feature { name: "emb" type: FLOAT shape { dim { size: 4 } } }
        feature { name: "clicked" type: INT value_count { min: 1 max: 1 } }
    """, schema_pb2.Schema())
    got = features_from_schema(schema, {"item_id": "int32", "clicked": "float32"})
    assert got == {"item_id": Feature("int32", 1, "int64"), "emb": Feature("float32", 4),
                   "clicked": Feature("float32", 1, "int64")}


def test_features_from_schema_label_the_preprocessing_fn_dropped_named_with_the_fix():
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2
    schema = text_format.Parse('feature { name: "item_id" type: INT shape { dim { size: 1 } } }',
                               schema_pb2.Schema())
    with pytest.raises(ExamplesReadError, match=r"features \['clicked'\] are not in the schema "
                       r"\(it has \['item_id'\]\): with Transform, the preprocessing_fn does "
                       r"not output them"):
        features_from_schema(schema, {"clicked": "float32"})


@pytest.mark.parametrize("shuffle", [False, True])
def test_reader_tf_gives_the_defensive_readers_batches(tmp_path, shuffle):
    root = _write(tmp_path, files=3, per_file=40)

    def batches(reader):
        return list(ExamplesDataset(root, "train", FEATURES, batch_size=16, chunk_records=32,
                                    shuffle=shuffle, seed=2, reader=reader))

    a, b = batches("defensive"), batches("tf")
    assert len(a) == len(b) == 8
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys() and all(
            x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]) for k in x)


@pytest.mark.parametrize("reader", ["defensive", "tf"])
def test_reader_refusals_name_the_same_record_for_both_readers(tmp_path, reader):
    over = _write(tmp_path / "over", item=lambda i: 3_000_000_000 if i == 57 else i)
    inexact = _write(tmp_path / "inexact", item=lambda i: 2**24 + 1 if i == 57 else i)
    short = _write(tmp_path / "short", broken=12)
    cases = [
        (over, FEATURES, r"data-00001\.gz, record 7: feature 'item_id' = 3000000000 "
                         r"does not fit int32"),
        (inexact, dict(FEATURES, item_id=Feature("float32", wire="int64")),
         r"data-00001\.gz, record 7: feature 'item_id' = 16777217 is not exactly a float32"),
        (short, FEATURES, r"data-00000\.gz, record 12: feature 'vec' has 2 values, "
                          r"expected 3"),
        (short, {"nope": Feature("float32")}, r"data-00000\.gz, record 0: feature 'nope' "
                                              r"has 0 values, expected 1"),
        (short, {"item_id": Feature("float32")}, r"data-00000\.gz, record 0: not "
                                                 r"a tf\.Example of the declared types"),
    ]
    for root, features, message in cases:
        with pytest.raises(ExamplesReadError, match=message):
            list(ExamplesDataset(root, "train", features, reader=reader))


def test_reader_auto_takes_tf_only_under_the_trainers_pipeline_examples(tmp_path, monkeypatch):
    from tfx_bridge.torch.examples import PIPELINE_EXAMPLES_ENV

    root = _write(tmp_path / "ex")
    assert ExamplesDataset(root, "train", FEATURES).reader == "defensive"  # from outside
    monkeypatch.setenv(PIPELINE_EXAMPLES_ENV, f'["{root}"]')
    assert ExamplesDataset(root, "train", FEATURES).reader == "tf"
    assert ExamplesDataset(root, "train", FEATURES, reader="defensive").reader == "defensive"
    outside = _write(tmp_path / "other")
    assert ExamplesDataset(outside, "train", FEATURES).reader == "defensive"
    sneaky = ExamplesDataset.from_patterns([f"{root}/../other/Split-train/*"], FEATURES)
    assert sneaky.reader == "defensive"
    monkeypatch.setenv(PIPELINE_EXAMPLES_ENV, "not json")
    assert ExamplesDataset(root, "train", FEATURES).reader == "defensive"
    with pytest.raises(ExamplesReadError, match=r"reader 'fast': use 'auto', 'defensive'"):
        ExamplesDataset(root, "train", FEATURES, reader="fast")


def test_reader_in_a_worker_forked_after_tf_ran_auto_reads_named_tf_refused_never_hangs(
        tmp_path, monkeypatch):
    from torch.utils.data import DataLoader

    from tfx_bridge.torch.examples import PIPELINE_EXAMPLES_ENV

    root = _write(tmp_path / "ex")
    monkeypatch.setenv(PIPELINE_EXAMPLES_ENV, f'["{root}"]')
    auto = ExamplesDataset(root, "train", FEATURES, batch_size=10, chunk_records=10)
    assert auto.reader == "tf"
    expected = sorted(_ids(auto))  # TF's reader ran here: its runtime has started

    def forked(dataset):  # a hung worker fails the test after 60 s instead of hanging it
        return DataLoader(dataset, batch_size=None, num_workers=1,
                          multiprocessing_context="fork", timeout=60)

    assert sorted(_ids(forked(auto))) == expected  # the same records, without TF
    named = ExamplesDataset(root, "train", FEATURES, batch_size=10, chunk_records=10,
                            reader="tf")
    with pytest.raises(ExamplesReadError, match=r"reader='tf' in a process forked after "
                       r"TensorFlow ran .* multiprocessing_context='spawn'"):
        list(forked(named))


def _collect(_worker_id):
    gc.collect()


def test_reader_worker_forked_with_tf_garbage_in_parent_collects_it_never_hangs(tmp_path):
    from torch.utils.data import DataLoader

    root = _write(tmp_path / "ex")
    ds = ExamplesDataset(root, "train", FEATURES, batch_size=10, chunk_records=10)
    gc.disable()  # a tf.data iterator held by a cycle, left to the collector at the fork
    try:
        held = {"iterator": iter(tf.data.Dataset.range(1000).prefetch(1)
                                 .map(lambda x: x + 1, num_parallel_calls=2).prefetch(1))}
        next(held["iterator"])
        held["self"] = held
        del held
        # A collection in the worker (here at its start) destroys nothing it inherited:
        # a hung worker fails the test after 60 s instead of hanging it.
        loader = DataLoader(ds, batch_size=None, num_workers=1, worker_init_fn=_collect,
                            multiprocessing_context="fork", timeout=60)
        assert sorted(_ids(loader)) == list(range(100))
    finally:
        gc.enable()
        gc.collect()
