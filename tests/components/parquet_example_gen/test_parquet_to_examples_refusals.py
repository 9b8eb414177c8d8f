"""The Parquet -> tf.Example core's refusals: unsupported types, schemas that differ
between files, unreadable or missing files, bad rows (with no partial output)."""
from __future__ import annotations

import decimal
import os
import sys

import pyarrow as pa
import pytest

from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
from tfx_bridge.components.parquet_example_gen.arrow_convert import convert_batch
from tfx_bridge.components.parquet_example_gen.arrow_types import FEATURE_INT, SOURCE_SCHEMA_FILE
from tfx_bridge.components.parquet_example_gen.errors import (
    ParquetConfigError,
    ParquetDataError,
    ParquetInputError,
    ParquetSchemaError,
)
from tfx_bridge.components.parquet_example_gen.plan import ColumnPlan, SplitConfig, plan_ingest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parquet_helpers import _direct, _write  # noqa: E402


def test_plan_struct_column_refused_with_flatten_hint(tmp_path):
    table = pa.table({"ok": [1], "user": pa.array([{"a": 1, "b": "x"}])})
    _write(str(tmp_path / "in" / "s.parquet"), table)
    with pytest.raises(ParquetSchemaError,
                       match=r"Column 'user' in s\.parquet: .*struct.*Table\.flatten"):
        plan_ingest(str(tmp_path / "in"), SplitConfig((("all", "*.parquet"),)))


@pytest.mark.parametrize("name,array,match", [
    ("m", pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())), r"map.*list column"),
    ("nl", pa.array([[[1, 2]]], pa.list_(pa.list_(pa.int64()))), r"nested list.*list_flatten"),
    ("dec", pa.array([decimal.Decimal("1.25")], pa.decimal128(5, 2)), r"decimal.*int64 in a"),
    ("nothing", pa.array([None], pa.null()), r"only nulls"),
])
def test_plan_unsupported_type_refused_naming_column(tmp_path, name, array, match):
    _write(str(tmp_path / "in" / "f.parquet"), pa.table({name: array}))
    with pytest.raises(ParquetSchemaError, match=rf"Column '{name}' in f\.parquet: .*{match}"):
        plan_ingest(str(tmp_path / "in"), SplitConfig((("all", "*.parquet"),)))


def test_plan_type_differs_between_files_names_both(tmp_path):
    _write(str(tmp_path / "in" / "a.parquet"), pa.table({"x": pa.array([1], pa.int32())}))
    _write(str(tmp_path / "in" / "b.parquet"), pa.table({"x": pa.array([1], pa.int64())}))
    with pytest.raises(ParquetSchemaError,
                       match=r"Column 'x': int32 in a\.parquet but int64 in b\.parquet"):
        plan_ingest(str(tmp_path / "in"), SplitConfig((("all", "*.parquet"),)))


def test_plan_collects_every_problem_then_raises_once(tmp_path):
    _write(str(tmp_path / "in" / "a.parquet"),
           pa.table({"x": pa.array([1], pa.int32()), "d": pa.array([{"k": 1}])}))
    _write(str(tmp_path / "in" / "b.parquet"), pa.table({"x": pa.array([1.0])}))
    with pytest.raises(ParquetSchemaError, match=r"(?s)3 problems.*'x'.*lacks.*'d'.*struct"):
        plan_ingest(str(tmp_path / "in"), SplitConfig((("all", "*.parquet"),)))


def test_plan_truncated_file_refused_naming_file(tmp_path):
    path = _write(str(tmp_path / "in" / "good.parquet"), pa.table({"x": [1, 2, 3]}))
    with open(path, "rb") as f:
        data = f.read()
    with open(tmp_path / "in" / "cut.parquet", "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(ParquetInputError, match=r"cut\.parquet: not a readable Parquet file.*"
                                                r"truncated"):
        plan_ingest(str(tmp_path / "in"), SplitConfig((("all", "*.parquet"),)))


def test_plan_no_matching_file_refused(tmp_path):
    os.makedirs(tmp_path / "in")
    with pytest.raises(ParquetInputError, match=r"No file matches 'span-3/\*\.parquet' under"):
        plan_ingest(str(tmp_path / "in"), SplitConfig((("all", "span-3/*.parquet"),)))


def test_plan_unknown_column_refused_listing_columns(tmp_path):
    _write(str(tmp_path / "in" / "a.parquet"), pa.table({"x": [1], "y": [2]}))
    with pytest.raises(ParquetConfigError, match=r"a\.parquet: no column 'z'; it has \['x', 'y'\]"):
        plan_ingest(str(tmp_path / "in"), SplitConfig((("all", "*.parquet"),)),
                         columns=["x", "z"])


def test_convert_null_inside_list_refused_with_row(tmp_path):
    batch = pa.record_batch([pa.array([[1], [2, None], None, [None]], pa.list_(pa.int32()))],
                            ["hist"])
    cols = [ColumnPlan("hist", "list<item: int32>", FEATURE_INT, True)]
    with pytest.raises(ParquetDataError,
                       match=r"Column 'hist' in part-3\.parquet \(rows 119, 121\): null inside "
                             r"a list; tf\.Example cannot encode it.*Fill or drop nulls upstream"):
        convert_batch(batch, cols, "part-3.parquet", first_row=118)


def test_convert_uint64_overflow_refused_with_row():
    batch = pa.record_batch([pa.array([1, 2**63, None], pa.uint64()),
                             pa.array([[0], [], [2**64 - 1]], pa.list_(pa.uint64()))],
                            ["u", "lu"])
    cols = [ColumnPlan("u", "uint64", FEATURE_INT, False),
            ColumnPlan("lu", "list<item: uint64>", FEATURE_INT, True)]
    with pytest.raises(ParquetDataError,
                       match=r"(?s)2 problems.*Column 'u' in f\.parquet \(row 1\): uint64 value "
                             r"9223372036854775808 exceeds int64 max.*Column 'lu' in f\.parquet "
                             r"\(row 2\)"):
        convert_batch(batch, cols, "f.parquet")


def test_ingest_bad_row_removes_partial_output(tmp_path):
    good = pa.table({"v": pa.array([[1, 2]] * 50, pa.list_(pa.int64()))})
    bad = pa.table({"v": pa.array([[1]] * 10 + [[None]], pa.list_(pa.int64()))})
    _write(str(tmp_path / "in" / "a.parquet"), good)
    _write(str(tmp_path / "in" / "b.parquet"), bad)
    plan = plan_ingest(str(tmp_path / "in"), SplitConfig((("all", "*.parquet"),)))
    with pytest.raises(ParquetDataError,
                       match=r"^Column 'v' in b\.parquet \(row 10\): null inside a list"):
        core.ingest(plan, str(tmp_path / "out"), _direct)
    assert not os.path.exists(tmp_path / "out" / "Split-all")
    assert not os.path.exists(tmp_path / "out" / SOURCE_SCHEMA_FILE)
