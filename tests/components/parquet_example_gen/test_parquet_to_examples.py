"""The Parquet -> tf.Example core: the type table value by value.

Refusals are in test_parquet_to_examples_refusals.py, splits in
test_parquet_to_examples_splits.py.
"""
from __future__ import annotations

import datetime
import glob
import json
import math
import os
import struct
import sys

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from tfx_bridge.components.parquet_example_gen.arrow_convert import convert_batch
from tfx_bridge.components.parquet_example_gen.arrow_types import FEATURE_FLOAT, SOURCE_SCHEMA_FILE
from tfx_bridge.components.parquet_example_gen.plan import ColumnPlan

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parquet_helpers import _ingest, _read_examples  # noqa: E402

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).tiny)


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
    with open(os.path.join(type_table_run["out"], SOURCE_SCHEMA_FILE)) as f:
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
    cols = [ColumnPlan("h", "halffloat", FEATURE_FLOAT, False)]
    out = convert_batch(batch, cols, "mem.parquet")
    got = out.column(0).flatten().to_numpy()
    assert np.array_equal(got.view(np.uint32), values.astype(np.float32).view(np.uint32))
