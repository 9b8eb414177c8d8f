"""SchemaGuard's core on s3:// Examples and reports (S3-compatible server on 127.0.0.1)."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfx_bridge.storage import fs

pytestmark = pytest.mark.s3


def _upload(local: str, remote: str) -> str:
    fs.copy_tree(local, remote)
    return remote


def _ingested(tmp_path, rows=40) -> str:
    from tfx_bridge import cli

    base = tmp_path / "in"
    base.mkdir()
    pq.write_table(pa.table({"user_id": pa.array(range(rows), pa.int64()),
                             "price": [float(i) / 3 for i in range(rows)]}),
                   str(base / "d.parquet"))
    out = str(tmp_path / "examples")
    assert cli.main(["ingest", "--input-base", str(base), "--output", out, "--quiet"]) == 0
    return out


SCHEMA = """
feature { name: "user_id" type: INT value_count { min: 1 max: 1 } }
feature { name: "price" type: FLOAT value_count { min: 1 max: 1 } }
"""


def test_schema_guard_core_on_s3_examples_and_reports(tmp_path, s3_bucket):
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    from tfx_bridge.components.schema_guard import guard, report
    from tfx_bridge.components.schema_guard.expectations import (
        GuardConfig,
        expectations_from_schema,
    )

    examples = _upload(_ingested(tmp_path), fs.join(s3_bucket, "examples"))
    schema = text_format.Parse(SCHEMA, schema_pb2.Schema())
    config = GuardConfig(expectations_from_schema(schema))
    findings = guard.scan_examples(examples, config)
    assert sorted(findings.records) == ["eval", "train"]
    assert sum(findings.records.values()) == 40 and not findings.sorted()
    out = fs.join(s3_bucket, "anomalies")
    summary = report.write_reports(out, findings, sorted(findings.records), schema)
    assert summary["blessed"] is True
    assert json.loads(fs.read_text(fs.join(out, report.FINDINGS_FILE)))["blessed"] is True
    assert fs.exists(fs.join(out, "Split-train", report.ANOMALIES_FILE))
