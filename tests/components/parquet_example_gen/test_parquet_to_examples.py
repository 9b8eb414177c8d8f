"""The Parquet -> tf.Example core: type table value by value, refusals, splits."""
from __future__ import annotations

import datetime
import decimal
import glob
import json
import math
import os
import struct

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
from tfx_bridge.components.parquet_example_gen.errors import (
    ParquetConfigError,
    ParquetDataError,
    ParquetInputError,
    ParquetSchemaError,
)
from tfx_bridge.storage.names import UnsafeNameError

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).tiny)


def _direct():
    return beam.Pipeline(runner="DirectRunner")


def _write(path, table, **kwargs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, **kwargs)
    return path


def _read_examples(split_uri):
    files = sorted(glob.glob(os.path.join(split_uri, "data_tfrecord-*.gz")))
    assert files, f"no TFRecord files in {split_uri}"
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return [tf.train.Example.FromString(r.numpy()) for r in ds]


def _ingest(tmp_path, table, splits=None, columns=None, **write_kwargs):
    _write(str(tmp_path / "in" / "part-0.parquet"), table, **write_kwargs)
    split_config = splits or core.SplitConfig((("all", "*.parquet"),))
    plan = core.plan_ingest(str(tmp_path / "in"), split_config, columns=columns)
    counts = core.ingest(plan, str(tmp_path / "out"), _direct)
    return plan, counts


def _feature_values(feature):
    kind = feature.WhichOneof("kind")
    if kind is None:
        return None, []
    return kind, list(getattr(feature, kind).value)


def _by_id(examples):
    return {ex.features.feature["id"].int64_list.value[0]: ex for ex in examples}


def _same_float(a, b):
    """Bit-for-bit equality of float32 values (NaN == NaN, -0.0 != 0.0)."""
    return struct.pack("<f", a) == struct.pack("<f", b)


# (arrow type, values, feature kind, expected values as carried by tf.Example)
_INT_CASES = [
    (pa.int8(), [0, -128, 127, -1]),
    (pa.int16(), [0, -32768, 32767, 1]),
    (pa.int32(), [0, I32_MIN, I32_MAX, -1]),
    (pa.int64(), [0, I64_MIN, I64_MAX, 1]),
    (pa.uint8(), [0, 255, 1, 7]),
    (pa.uint16(), [0, 65535, 1, 7]),
    (pa.uint32(), [0, 2**32 - 1, 1, 7]),
    (pa.uint64(), [0, I64_MAX, 1, 7]),
]


@pytest.fixture(scope="module")
def type_table_run(tmp_path_factory):
    """One file with a column per type of the README table, ingested once."""
    tmp = tmp_path_factory.mktemp("types")
    n = 4
    cols = {"id": pa.array(range(n), pa.int64())}
    for t, values in _INT_CASES:
        cols[f"s_{t}"] = pa.array(values, t)
        cols[f"l_{t}"] = pa.array([[v, values[(i + 1) % n]] for i, v in enumerate(values)],
                                  pa.list_(t))
    cols["s_bool"] = pa.array([False, True, False, True])
    cols["l_bool"] = pa.array([[False], [True, False], [], [True]], pa.list_(pa.bool_()))
    floats = [0.0, -0.0, float("nan"), float("inf")]
    cols["s_float32"] = pa.array(floats, pa.float32())
    cols["l_float32"] = pa.array([[float("-inf"), F32_MAX], [F32_TINY], [-0.0], [float("nan")]],
                                 pa.list_(pa.float32()))
    cols["s_float64"] = pa.array([0.1, -0.0, float("nan"), 1e300], pa.float64())
    cols["s_string"] = pa.array(["", "click", "é✓", "a\x00b"], pa.string())
    cols["s_large_string"] = pa.array(["", "x", "y", "z"], pa.large_string())
    cols["s_binary"] = pa.array([b"", b"\xff\xfe\x00", b"\x80", b"ok"], pa.binary())
    cols["s_large_binary"] = pa.array([b"", b"\xff", b"\x00", b"q"], pa.large_binary())
    cols["s_fixed_binary"] = pa.array([b"\x00\x01", b"\xff\xff", b"ab", b"\x80\x00"],
                                      pa.binary(2))
    cols["s_dict"] = pa.array(["b", "", "b", "c"]).dictionary_encode()
    cols["l_string"] = pa.array([[""], ["a", "b"], [], ["\u00e9"]], pa.list_(pa.string()))
    cols["ll_binary"] = pa.array([[b"\xff"], [], [b""], [b"a", b"b"]],
                                 pa.large_list(pa.binary()))
    cols["fl_int32"] = pa.array([[1, 2], [I32_MIN, I32_MAX], [0, 0], [-1, 3]],
                                pa.list_(pa.int32(), 2))
    cols["s_ts_ms"] = pa.array([0, -1, 1_700_000_000_123, 1], pa.timestamp("ms"))
    cols["s_ts_us_tz"] = pa.array([0, 1, -1, 5], pa.timestamp("us", tz="UTC"))
    cols["s_date32"] = pa.array([datetime.date(1970, 1, 1), datetime.date(1969, 12, 31),
                                 datetime.date(2024, 2, 29), datetime.date(1970, 1, 2)])
    cols["s_date64"] = pa.array([0, 86_400_000, -86_400_000, 0], pa.date64())
    cols["s_time64"] = pa.array([0, 1, 86_399_999_999, 5], pa.time64("us"))
    cols["s_time32"] = pa.array([0, 1, 86_399, 5], pa.time32("s"))
    cols["s_duration"] = pa.array([0, -5, I64_MAX, 7], pa.duration("ns"))
    cols["s_nullable"] = pa.array([None, 0, None, 3], pa.int64())
    cols["l_nullable"] = pa.array([None, [], [0], None], pa.list_(pa.int64()))
    cols["s_all_null_str"] = pa.array([None, None, None, None], pa.string())
    table = pa.table(cols)
    plan, counts = _ingest(tmp, table, row_group_size=3)  # two row groups
    examples = _by_id(_read_examples(str(tmp / "out" / "Split-all")))
    return {"plan": plan, "counts": counts, "examples": examples, "table": table,
            "out": str(tmp / "out")}


@pytest.mark.parametrize("arrow_type,values", _INT_CASES, ids=[str(t) for t, _ in _INT_CASES])
def test_ingest_integer_edges_exact(type_table_run, arrow_type, values):
    ex = type_table_run["examples"]
    n = len(values)
    for i, v in enumerate(values):
        assert _feature_values(ex[i].features.feature[f"s_{arrow_type}"]) == ("int64_list", [v])
        assert _feature_values(ex[i].features.feature[f"l_{arrow_type}"]) == (
            "int64_list", [v, values[(i + 1) % n]])


def test_ingest_bool_zero_and_false_kept(type_table_run):
    ex = type_table_run["examples"]
    assert [_feature_values(ex[i].features.feature["s_bool"]) for i in range(4)] == [
        ("int64_list", [0]), ("int64_list", [1]), ("int64_list", [0]), ("int64_list", [1])]
    assert _feature_values(ex[2].features.feature["l_bool"]) == ("int64_list", [])
    assert _feature_values(ex[1].features.feature["l_bool"]) == ("int64_list", [1, 0])


def test_ingest_float32_bits_kept(type_table_run):
    ex = type_table_run["examples"]
    for i, v in enumerate([0.0, -0.0, float("nan"), float("inf")]):
        kind, got = _feature_values(ex[i].features.feature["s_float32"])
        assert kind == "float_list" and len(got) == 1 and _same_float(got[0], v), (i, got)
    kind, got = _feature_values(ex[0].features.feature["l_float32"])
    assert got == [float("-inf"), F32_MAX]
    assert _feature_values(ex[1].features.feature["l_float32"])[1] == [F32_TINY]
    assert _same_float(_feature_values(ex[2].features.feature["l_float32"])[1][0], -0.0)
    assert math.isnan(_feature_values(ex[3].features.feature["l_float32"])[1][0])


def test_ingest_float64_narrowed_to_float32(type_table_run):
    ex = type_table_run["examples"]
    got = [_feature_values(ex[i].features.feature["s_float64"])[1][0] for i in range(4)]
    assert _same_float(got[0], float(np.float32(0.1)))
    assert _same_float(got[1], -0.0)
    assert math.isnan(got[2])
    assert got[3] == float("inf")  # beyond float32 range: documented narrowing


@pytest.mark.parametrize("column,expected", [
    ("s_string", [b"", b"click", "é✓".encode(), b"a\x00b"]),
    ("s_large_string", [b"", b"x", b"y", b"z"]),
    ("s_binary", [b"", b"\xff\xfe\x00", b"\x80", b"ok"]),
    ("s_large_binary", [b"", b"\xff", b"\x00", b"q"]),
    ("s_fixed_binary", [b"\x00\x01", b"\xff\xff", b"ab", b"\x80\x00"]),
    ("s_dict", [b"b", b"", b"b", b"c"]),
])
def test_ingest_bytes_unchanged(type_table_run, column, expected):
    ex = type_table_run["examples"]
    for i, v in enumerate(expected):
        assert _feature_values(ex[i].features.feature[column]) == ("bytes_list", [v])


def test_ingest_list_layouts_kept(type_table_run):
    ex = type_table_run["examples"]
    assert _feature_values(ex[1].features.feature["l_string"]) == ("bytes_list", [b"a", b"b"])
    assert _feature_values(ex[2].features.feature["l_string"]) == ("bytes_list", [])
    assert _feature_values(ex[0].features.feature["l_string"]) == ("bytes_list", [b""])
    assert _feature_values(ex[0].features.feature["ll_binary"]) == ("bytes_list", [b"\xff"])
    assert _feature_values(ex[1].features.feature["fl_int32"]) == ("int64_list",
                                                                   [I32_MIN, I32_MAX])


@pytest.mark.parametrize("column,expected", [
    ("s_ts_ms", [0, -1, 1_700_000_000_123, 1]),
    ("s_ts_us_tz", [0, 1, -1, 5]),
    ("s_date32", [0, -1, 19782, 1]),
    # Parquet stores date64 as DATE (days), so it reads back as date32.
    ("s_date64", [0, 1, -1, 0]),
    ("s_time64", [0, 1, 86_399_999_999, 5]),
    # Parquet has no TIME(SECONDS): time32[s] is stored and read back as time32[ms].
    ("s_time32", [0, 1000, 86_399_000, 5000]),
    ("s_duration", [0, -5, I64_MAX, 7]),
])
def test_ingest_temporal_as_int64_in_unit(type_table_run, column, expected):
    ex = type_table_run["examples"]
    assert [_feature_values(ex[i].features.feature[column]) for i in range(4)] == [
        ("int64_list", [v]) for v in expected]


def test_ingest_null_is_absent_empty_list_is_present(type_table_run):
    ex = type_table_run["examples"]
    assert "s_nullable" not in ex[0].features.feature
    assert _feature_values(ex[1].features.feature["s_nullable"]) == ("int64_list", [0])
    assert "l_nullable" not in ex[0].features.feature
    assert _feature_values(ex[1].features.feature["l_nullable"]) == ("int64_list", [])
    assert "l_nullable" not in ex[3].features.feature
    assert all("s_all_null_str" not in ex[i].features.feature for i in range(4))


def test_ingest_sidecar_records_source_types(type_table_run):
    with open(os.path.join(type_table_run["out"], core.SOURCE_SCHEMA_FILE)) as f:
        sidecar = json.load(f)
    assert sidecar["format"] == "parquet"
    assert sidecar["columns"]["s_int32"] == {"arrow_type": "int32", "feature": "int64_list",
                                             "list": False}
    assert sidecar["columns"]["l_int32"]["arrow_type"] == "list<item: int32>"
    assert sidecar["columns"]["s_float64"]["feature"] == "float_list"
    assert sidecar["num_rows"] == 4
    assert type_table_run["counts"] == {"all": 4}


def test_ingest_parses_with_tf_parse_example(type_table_run):
    """The records parse with the stock parser, int32 sources as int64."""
    files = glob.glob(os.path.join(type_table_run["out"], "Split-all", "*.gz"))
    records = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    parsed = tf.io.parse_example(records, {
        "s_int32": tf.io.FixedLenFeature([], tf.int64),
        "s_nullable": tf.io.FixedLenFeature([], tf.int64, default_value=-7),
        "l_int32": tf.io.VarLenFeature(tf.int64),
    })
    ids = [ex.features.feature["id"].int64_list.value[0] for ex in map(
        tf.train.Example.FromString, records)]
    by_id = dict(zip(ids, parsed["s_nullable"].numpy().tolist(), strict=True))
    assert by_id == {0: -7, 1: 0, 2: -7, 3: 3}
    assert sorted(parsed["s_int32"].numpy().tolist()) == sorted([0, I32_MIN, I32_MAX, -1])


def test_convert_batch_float16_widened_exactly():
    values = np.array([0, -0.0, 1.5, 65504, np.nan, -np.inf], np.float16)
    batch = pa.record_batch([pa.array(values)], ["h"])
    cols = [core.ColumnPlan("h", "halffloat", core.FEATURE_FLOAT, False)]
    out = core.convert_batch(batch, cols, "mem.parquet")
    got = out.column(0).flatten().to_numpy()
    assert np.array_equal(got.view(np.uint32), values.astype(np.float32).view(np.uint32))


# --------------------------------------------------------------------------- refusals


def test_plan_struct_column_refused_with_flatten_hint(tmp_path):
    table = pa.table({"ok": [1], "user": pa.array([{"a": 1, "b": "x"}])})
    _write(str(tmp_path / "in" / "s.parquet"), table)
    with pytest.raises(ParquetSchemaError,
                       match=r"Column 'user' in s\.parquet: .*struct.*Table\.flatten"):
        core.plan_ingest(str(tmp_path / "in"), core.SplitConfig((("all", "*.parquet"),)))


@pytest.mark.parametrize("name,array,match", [
    ("m", pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())), r"map.*list column"),
    ("nl", pa.array([[[1, 2]]], pa.list_(pa.list_(pa.int64()))), r"nested list.*list_flatten"),
    ("dec", pa.array([decimal.Decimal("1.25")], pa.decimal128(5, 2)), r"decimal.*int64 in a"),
    ("nothing", pa.array([None], pa.null()), r"only nulls"),
])
def test_plan_unsupported_type_refused_naming_column(tmp_path, name, array, match):
    _write(str(tmp_path / "in" / "f.parquet"), pa.table({name: array}))
    with pytest.raises(ParquetSchemaError, match=rf"Column '{name}' in f\.parquet: .*{match}"):
        core.plan_ingest(str(tmp_path / "in"), core.SplitConfig((("all", "*.parquet"),)))


def test_plan_type_differs_between_files_names_both(tmp_path):
    _write(str(tmp_path / "in" / "a.parquet"), pa.table({"x": pa.array([1], pa.int32())}))
    _write(str(tmp_path / "in" / "b.parquet"), pa.table({"x": pa.array([1], pa.int64())}))
    with pytest.raises(ParquetSchemaError,
                       match=r"Column 'x': int32 in a\.parquet but int64 in b\.parquet"):
        core.plan_ingest(str(tmp_path / "in"), core.SplitConfig((("all", "*.parquet"),)))


def test_plan_collects_every_problem_then_raises_once(tmp_path):
    _write(str(tmp_path / "in" / "a.parquet"),
           pa.table({"x": pa.array([1], pa.int32()), "d": pa.array([{"k": 1}])}))
    _write(str(tmp_path / "in" / "b.parquet"), pa.table({"x": pa.array([1.0])}))
    with pytest.raises(ParquetSchemaError, match=r"(?s)3 problems.*'x'.*lacks.*'d'.*struct"):
        core.plan_ingest(str(tmp_path / "in"), core.SplitConfig((("all", "*.parquet"),)))


def test_plan_truncated_file_refused_naming_file(tmp_path):
    path = _write(str(tmp_path / "in" / "good.parquet"), pa.table({"x": [1, 2, 3]}))
    with open(path, "rb") as f:
        data = f.read()
    with open(tmp_path / "in" / "cut.parquet", "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(ParquetInputError, match=r"cut\.parquet: not a readable Parquet file.*"
                                                r"truncated"):
        core.plan_ingest(str(tmp_path / "in"), core.SplitConfig((("all", "*.parquet"),)))


def test_plan_no_matching_file_refused(tmp_path):
    os.makedirs(tmp_path / "in")
    with pytest.raises(ParquetInputError, match=r"No file matches 'span-3/\*\.parquet' under"):
        core.plan_ingest(str(tmp_path / "in"), core.SplitConfig((("all", "span-3/*.parquet"),)))


def test_plan_unknown_column_refused_listing_columns(tmp_path):
    _write(str(tmp_path / "in" / "a.parquet"), pa.table({"x": [1], "y": [2]}))
    with pytest.raises(ParquetConfigError, match=r"a\.parquet: no column 'z'; it has \['x', 'y'\]"):
        core.plan_ingest(str(tmp_path / "in"), core.SplitConfig((("all", "*.parquet"),)),
                         columns=["x", "z"])


def test_convert_null_inside_list_refused_with_row(tmp_path):
    batch = pa.record_batch([pa.array([[1], [2, None], None, [None]], pa.list_(pa.int32()))],
                            ["hist"])
    cols = [core.ColumnPlan("hist", "list<item: int32>", core.FEATURE_INT, True)]
    with pytest.raises(ParquetDataError,
                       match=r"Column 'hist' in part-3\.parquet \(rows 119, 121\): null inside "
                             r"a list; tf\.Example cannot encode it.*Fill or drop nulls upstream"):
        core.convert_batch(batch, cols, "part-3.parquet", first_row=118)


def test_convert_uint64_overflow_refused_with_row():
    batch = pa.record_batch([pa.array([1, 2**63, None], pa.uint64()),
                             pa.array([[0], [], [2**64 - 1]], pa.list_(pa.uint64()))],
                            ["u", "lu"])
    cols = [core.ColumnPlan("u", "uint64", core.FEATURE_INT, False),
            core.ColumnPlan("lu", "list<item: uint64>", core.FEATURE_INT, True)]
    with pytest.raises(ParquetDataError,
                       match=r"(?s)2 problems.*Column 'u' in f\.parquet \(row 1\): uint64 value "
                             r"9223372036854775808 exceeds int64 max.*Column 'lu' in f\.parquet "
                             r"\(row 2\)"):
        core.convert_batch(batch, cols, "f.parquet")


def test_ingest_bad_row_removes_partial_output(tmp_path):
    good = pa.table({"v": pa.array([[1, 2]] * 50, pa.list_(pa.int64()))})
    bad = pa.table({"v": pa.array([[1]] * 10 + [[None]], pa.list_(pa.int64()))})
    _write(str(tmp_path / "in" / "a.parquet"), good)
    _write(str(tmp_path / "in" / "b.parquet"), bad)
    plan = core.plan_ingest(str(tmp_path / "in"), core.SplitConfig((("all", "*.parquet"),)))
    with pytest.raises(ParquetDataError,
                       match=r"^Column 'v' in b\.parquet \(row 10\): null inside a list"):
        core.ingest(plan, str(tmp_path / "out"), _direct)
    assert not os.path.exists(tmp_path / "out" / "Split-all")
    assert not os.path.exists(tmp_path / "out" / core.SOURCE_SCHEMA_FILE)


# --------------------------------------------------------------------------- splits


def test_ingest_default_hash_split_about_two_to_one(tmp_path):
    table = pa.table({"id": pa.array(range(3000), pa.int64())})
    splits = core.SplitConfig.parse("train:2,eval:1", "*.parquet")
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
    splits = core.SplitConfig.parse("a:1,b:1,c:1", "*.parquet", partition_feature="user")
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
    splits = core.SplitConfig((("train", "train/*.parquet"), ("test", "test/*.parquet")))
    plan = core.plan_ingest(str(tmp_path / "in"), splits)
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
        core.SplitConfig(**kwargs)


def test_split_config_parse_bad_spec_refused():
    with pytest.raises(ParquetConfigError, match=r"Bad split 'eval' in 'train:2,eval'"):
        core.SplitConfig.parse("train:2,eval", "*.parquet")


def test_tfrecord_frames_read_by_tensorflow(tmp_path):
    records = [b"", b"a", b"\x00" * 1000]
    path = tmp_path / "r.tfrecord"
    path.write_bytes(core.tfrecord_frames(records))
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
    splits = core.SplitConfig.parse("train:2,eval:1", "*.parquet")
    plan = core.plan_ingest(str(tmp_path / "in"), splits, batch_size=300)
    core.ingest(plan, str(tmp_path / "a"), _direct)
    code = (
        "import apache_beam as beam\n"
        "from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core\n"
        f"plan = core.plan_ingest({str(tmp_path / 'in')!r}, "
        "core.SplitConfig.parse('train:2,eval:1', '*.parquet'), batch_size=1000)\n"
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
    a = core.row_hashes(pa.record_batch([left], ["c"]), ["c"])
    b = core.row_hashes(pa.record_batch([right], ["c"]), ["c"])
    assert a[0] != b[0]


def test_row_hashes_sliced_batch_same_as_whole():
    arr = pa.array([[1], [2, 3], None, [], [4]], pa.list_(pa.int64()))
    whole = core.row_hashes(pa.record_batch([arr], ["c"]), ["c"])
    part = core.row_hashes(pa.record_batch([arr.slice(2)], ["c"]), ["c"])
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
    splits = core.SplitConfig.parse("train:2,eval:1", "*.parquet")
    plan = core.plan_ingest(str(tmp_path / "in"), splits)
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
        core.SplitConfig.parse(splits, "*.parquet")
