"""The terminal's findings table: one row per finding, long cells cut to the width."""
from __future__ import annotations

from tfx_bridge.components.schema_guard.findings import Finding, Findings
from tfx_bridge.components.schema_guard.report import summary_table


def _findings() -> Findings:
    found = Findings()
    found.add(Finding("data_vs_schema.wire_kind", "hour", "train", "int64_list",
                      "float_list", "cast hour to int", count=3))
    found.add(Finding("data_vs_consumer.range", "item_id", "eval",
                      "values in [-2147483648, 2147483647] (int32 consumer) " * 3,
                      "3000000000 " * 20, "widen the consumer", count=2))
    return found


def test_summary_table_one_row_per_finding_with_records_and_header():
    lines = summary_table(_findings(), width=200).splitlines()
    assert lines[0].split() == ["split", "feature", "check", "expected", "actual", "records"]
    assert set(lines[1]) <= {"-", " "}
    rows = lines[2:]
    assert len(rows) == 2
    hour = next(r for r in rows if " hour " in r)
    assert hour.split()[:5] == ["train", "hour", "data_vs_schema.wire_kind", "int64_list",
                                "float_list"] and hour.split()[-1] == "3"


def test_summary_table_long_cells_cut_to_the_width():
    lines = summary_table(_findings(), width=100).splitlines()
    assert all(len(line) <= 100 for line in lines), [len(x) for x in lines]
    assert any("..." in line for line in lines)
