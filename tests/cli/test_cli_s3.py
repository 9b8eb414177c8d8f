"""The CLI on s3:// paths, configured by the standard AWS variables only
(S3-compatible server on 127.0.0.1)."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfx_bridge.storage import fs

pytestmark = pytest.mark.s3

SCHEMA = """
feature { name: "user_id" type: INT value_count { min: 1 max: 1 } }
feature { name: "price" type: FLOAT value_count { min: 1 max: 1 } }
"""


def test_cli_ingest_then_validate_on_s3_from_aws_variables(tmp_path, s3_bucket, s3_server,
                                                           cli_in_child):
    base = tmp_path / "in"
    base.mkdir()
    pq.write_table(pa.table({"user_id": pa.array(range(40), pa.int64()),
                             "price": [float(i) / 3 for i in range(40)]}),
                   str(base / "d.parquet"))
    fs.copy(str(base / "d.parquet"), fs.join(s3_bucket, "data", "span-1", "d.parquet"))
    schema = fs.join(s3_bucket, "schema.pbtxt")
    fs.write_text(schema, SCHEMA)
    env = {k: v for k, v in os.environ.items() if not k.startswith("S3_")}
    env.update(s3_server)  # only the standard AWS variables
    examples = fs.join(s3_bucket, "examples")
    proc = cli_in_child("ingest", "--input-base", fs.join(s3_bucket, "data", "span-1"),
                        "--output", examples, "--quiet", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert fs.listdir(examples) == ["Split-eval", "Split-train", "source_schema.json"]
    out = fs.join(s3_bucket, "validated")
    proc = cli_in_child("validate", "--examples", examples, "--schema", schema, "--output",
                        out, "--quiet", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Clean: no findings." in proc.stdout
    assert f"Report: {out}/report.md" in proc.stdout
    assert fs.isfile(fs.join(out, "report.md"))


def test_cli_s3_endpoint_without_credentials_names_variables(tmp_path, s3_server,
                                                             cli_in_child):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("S3_", "AWS_ACCESS", "AWS_SECRET"))}
    env["AWS_ENDPOINT_URL"] = s3_server["AWS_ENDPOINT_URL"]
    proc = cli_in_child("validate", "--examples", "s3://nobucket/ex", "--schema",
                        "s3://nobucket/s.pbtxt", "--output", "s3://nobucket/o", env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert ("needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
            "AWS_PROFILE)") in proc.stderr
    assert "Traceback" not in proc.stderr
