"""The Parquet -> tf.Example core's splits: hash buckets, partition features, input
splits, row hashes stable across batch sizes, processes and runners."""
from __future__ import annotations

import os
import sys

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
from tfx_bridge.components.parquet_example_gen.errors import ParquetConfigError
from tfx_bridge.components.parquet_example_gen.plan import SplitConfig, plan_ingest
from tfx_bridge.components.parquet_example_gen.split_hash import row_hashes
from tfx_bridge.components.parquet_example_gen.tfrecord_writer import tfrecord_frames
from tfx_bridge.storage.names import UnsafeNameError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parquet_helpers import _direct, _ingest, _read_examples, _write  # noqa: E402


def test_ingest_default_hash_split_about_two_to_one(tmp_path):
    table = pa.table({"id": pa.array(range(3000), pa.int64())})
    splits = SplitConfig.parse("train:2,eval:1", "*.parquet")
    _, counts = _ingest(tmp_path, table, splits=splits)
    assert sum(counts.values()) == 3000
    assert 1850 < counts["train"] < 2150, counts
    train = {e.features.feature["id"].int64_list.value[0]
             for e in _read_examples(str(tmp_path / "out" / "Split-train"))}
    evals = {e.features.feature["id"].int64_list.value[0]
             for e in _read_examples(str(tmp_path / "out" / "Split-eval"))}
    assert not train & evals and len(train | evals) == 3000


def test_ingest_partition_feature_keeps_key_in_one_split(tmp_path):
    users = np.repeat(np.arange(40), 25)
    table = pa.table({"user": pa.array(users, pa.int64()),
                      "row": pa.array(np.arange(len(users)), pa.int64())})
    splits = SplitConfig.parse("a:1,b:1,c:1", "*.parquet", partition_feature="user")
    _, counts = _ingest(tmp_path, table, splits=splits)
    assert sum(counts.values()) == 1000 and min(counts.values()) > 0
    owner = {}
    for split in "abc":
        for e in _read_examples(str(tmp_path / "out" / f"Split-{split}")):
            user = e.features.feature["user"].int64_list.value[0]
            assert owner.setdefault(user, split) == split


def test_ingest_input_splits_kept_without_output_config(tmp_path):
    _write(str(tmp_path / "in" / "train" / "a.parquet"), pa.table({"x": [1, 2, 3]}))
    _write(str(tmp_path / "in" / "test" / "a.parquet"), pa.table({"x": [4]}))
    splits = SplitConfig((("train", "train/*.parquet"), ("test", "test/*.parquet")))
    plan = plan_ingest(str(tmp_path / "in"), splits)
    assert core.ingest(plan, str(tmp_path / "out"), _direct) == {"train": 3, "test": 1}


def test_ingest_column_projection_reads_only_named_columns(tmp_path):
    table = pa.table({"a": [1, 2], "b": ["x", "y"], "c": [0.5, 1.5]})
    _, counts = _ingest(tmp_path, table, columns=["c", "a"])
    for ex in _read_examples(str(tmp_path / "out" / "Split-all")):
        assert sorted(ex.features.feature.keys()) == ["a", "c"]


@pytest.mark.parametrize("kwargs,match", [
    (dict(input_patterns=()), r"No input split"),
    (dict(input_patterns=(("a", "*"), ("b", "*")), output_splits=(("t", 1),)),
     r"partition one input split, but 2 were given"),
    (dict(input_patterns=(("a", "*"),), output_splits=(("t", 0),)), r"positive hash_buckets"),
    (dict(input_patterns=(("a", "*"),), partition_feature="u"), r"needs output splits"),
])
def test_split_config_bad_config_refused(kwargs, match):
    with pytest.raises(ParquetConfigError, match=match):
        SplitConfig(**kwargs)


def test_split_config_parse_bad_spec_refused():
    with pytest.raises(ParquetConfigError, match=r"Bad split 'eval' in 'train:2,eval'"):
        SplitConfig.parse("train:2,eval", "*.parquet")


def test_tfrecord_frames_read_by_tensorflow(tmp_path):
    records = [b"", b"a", b"\x00" * 1000]
    path = tmp_path / "r.tfrecord"
    path.write_bytes(tfrecord_frames(records))
    assert [r.numpy() for r in tf.data.TFRecordDataset([str(path)])] == records


def _split_ids(out):
    return {split: sorted(e.features.feature["id"].int64_list.value[0]
                          for e in _read_examples(os.path.join(out, f"Split-{split}")))
            for split in ("train", "eval")}


def test_ingest_split_membership_same_across_batch_sizes_and_processes(tmp_path):
    """The encoder's feature order changes per process; splits must not."""
    import subprocess
    import sys
    table = pa.table({"id": pa.array(range(2000), pa.int64()),
                      "tags": pa.array([["a", "b"][: i % 3] for i in range(2000)],
                                       pa.list_(pa.string())),
                      "x": pa.array(np.linspace(-1, 1, 2000), pa.float64())})
    _write(str(tmp_path / "in" / "p.parquet"), table, row_group_size=700)
    splits = SplitConfig.parse("train:2,eval:1", "*.parquet")
    plan = plan_ingest(str(tmp_path / "in"), splits, batch_size=300)
    core.ingest(plan, str(tmp_path / "a"), _direct)
    code = (
        "import apache_beam as beam\n"
        "from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core\n"
        "from tfx_bridge.components.parquet_example_gen.plan import SplitConfig, plan_ingest\n"
        f"plan = plan_ingest({str(tmp_path / 'in')!r}, "
        "SplitConfig.parse('train:2,eval:1', '*.parquet'), batch_size=1000)\n"
        f"core.ingest(plan, {str(tmp_path / 'b')!r}, lambda: beam.Pipeline('DirectRunner'))\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    assert _split_ids(str(tmp_path / "a")) == _split_ids(str(tmp_path / "b"))


@pytest.mark.parametrize("left,right", [
    (pa.array([None], pa.list_(pa.int64())), pa.array([[]], pa.list_(pa.int64()))),
    (pa.array([["ab"]], pa.list_(pa.binary())), pa.array([["a", "b"]], pa.list_(pa.binary()))),
    (pa.array([[0.0]], pa.list_(pa.float32())), pa.array([[-0.0]], pa.list_(pa.float32()))),
    (pa.array([[1, 2]], pa.list_(pa.int64())), pa.array([[2, 1]], pa.list_(pa.int64()))),
])
def test_row_hashes_distinguish_values(left, right):
    a = row_hashes(pa.record_batch([left], ["c"]), ["c"])
    b = row_hashes(pa.record_batch([right], ["c"]), ["c"])
    assert a[0] != b[0]


def test_row_hashes_sliced_batch_same_as_whole():
    arr = pa.array([[1], [2, 3], None, [], [4]], pa.list_(pa.int64()))
    whole = row_hashes(pa.record_batch([arr], ["c"]), ["c"])
    part = row_hashes(pa.record_batch([arr.slice(2)], ["c"]), ["c"])
    assert part.tolist() == whole[2:].tolist()


@pytest.mark.slow
def test_ingest_direct_runner_multi_process_same_records(tmp_path):
    """beam_pipeline_args reach a multi-process DirectRunner; the records are the same."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfx_bridge.beam import direct_runner_args

    table = pa.table({"id": pa.array(range(900), pa.int64()),
                      "v": pa.array([[i, i + 1] for i in range(900)], pa.list_(pa.int32()))})
    for k in range(3):
        _write(str(tmp_path / "in" / f"p{k}.parquet"), table.slice(k * 300, 300))
    splits = SplitConfig.parse("train:2,eval:1", "*.parquet")
    plan = plan_ingest(str(tmp_path / "in"), splits)
    args = direct_runner_args(2)
    assert "--direct_running_mode=multi_processing" in args
    multi = core.ingest(plan, str(tmp_path / "multi"),
                        lambda: beam.Pipeline(options=PipelineOptions(args)))
    single = core.ingest(plan, str(tmp_path / "single"), _direct)
    assert multi == single and sum(multi.values()) == 900
    assert _split_ids(str(tmp_path / "multi")) == _split_ids(str(tmp_path / "single"))


@pytest.mark.parametrize("splits", ["x:1,x/../../ESCAPED:1", "../a:1", "train:1,:1",
                                    "a/b:1", ".hidden:1"])
def test_split_names_that_are_not_one_folder_refused(tmp_path, splits):
    with pytest.raises(UnsafeNameError, match=r"Split name .* cannot be used as a folder"):
        SplitConfig.parse(splits, "*.parquet")
