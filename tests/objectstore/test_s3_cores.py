"""Cores on s3:// paths, against an S3-compatible server started on 127.0.0.1."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from tfx_bridge.storage import fs


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


def test_fs_layer_on_s3_round_trip(s3_bucket):
    root = fs.join(s3_bucket, "a")
    fs.write_text(fs.join(root, "x", "t.txt"), "hello")
    assert fs.read_text(fs.join(root, "x", "t.txt")) == "hello"
    assert fs.isdir(fs.join(root, "x")) and fs.files_under(root) == ["x/t.txt"]
    fs.remove(root)
    assert not fs.exists(fs.join(root, "x", "t.txt"))


def test_schema_guard_core_on_s3_examples_and_reports(tmp_path, s3_bucket):
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    from tfx_bridge.components.schema_guard import guard, report

    examples = _upload(_ingested(tmp_path), fs.join(s3_bucket, "examples"))
    schema = text_format.Parse(SCHEMA, schema_pb2.Schema())
    config = guard.GuardConfig(guard.expectations_from_schema(schema))
    findings = guard.scan_examples(examples, config)
    assert sorted(findings.records) == ["eval", "train"]
    assert sum(findings.records.values()) == 40 and not findings.sorted()
    out = fs.join(s3_bucket, "anomalies")
    summary = report.write_reports(out, findings, sorted(findings.records), schema)
    assert summary["blessed"] is True
    assert json.loads(fs.read_text(fs.join(out, report.FINDINGS_FILE)))["blessed"] is True
    assert fs.exists(fs.join(out, "Split-train", report.ANOMALIES_FILE))


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


def test_import_then_optimize_s3_source_and_outputs(tmp_path, s3_bucket):
    torch = __import__("pytest").importorskip("torch", reason="needs the [onnx] extra (torch)")
    from tfx_bridge.components.pytorch_model_importer import convert, signature
    from tfx_bridge.components.trt_optimizer import detect, optimize
    from tfx_bridge.pipelines import demo_models

    local = str(tmp_path / "mlp.pt")
    torch.save(demo_models.build("mlp").state_dict(), local)
    weights = fs.join(s3_bucket, "research", "mlp.pt")
    fs.copy(local, weights)
    imported = fs.join(s3_bucket, "imported")
    result = convert.import_model(
        convert.ModelSource("state_dict", weights, "tfx_bridge.pipelines.demo_models:MLP"),
        signature.parse_input_specs(["x:float32:-1,8"]), ["logits"], imported)
    assert result.blessed and result.serving_dir == fs.join(imported, "Format-Serving")
    report = json.loads(fs.read_text(fs.join(imported, "report.json")))
    assert report["blessed"] is True and report["source"]["path"] == weights
    assert fs.isfile(fs.join(imported, "Format-Serving", "saved_model.pb"))

    optimized = fs.join(s3_bucket, "optimized")
    probe = detect.Probe(False, 0, None, None, "not probed in this test (CPU path)")
    out = optimize.optimize(imported, optimized, iterations=10, probe=probe)
    assert out.blessed
    saved = json.loads(fs.read_text(fs.join(optimized, "report.json")))
    assert saved["candidate"] == out.report["candidate"]
    assert fs.isfile(fs.join(optimized, "Format-Serving", "saved_model.pb"))


def test_push_model_from_s3_to_local_base_path(tmp_path, s3_bucket, scaled_saved_model):
    from tfx_bridge.components.serving_pusher import serving

    remote = fs.join(s3_bucket, "optimized", "Format-Serving")
    fs.copy_tree(scaled_saved_model(str(tmp_path / "m")), remote)
    result = serving.push(remote, str(tmp_path / "serving"), "ctr")
    assert result.pushed and result.version == 1
    assert (tmp_path / "serving" / "ctr" / "1" / "saved_model.pb").is_file()


def test_push_gs_base_path_refused_nothing_written(tmp_path, monkeypatch, scaled_saved_model):
    import pytest

    from tfx_bridge.components.serving_pusher import serving
    from tfx_bridge.components.serving_pusher.errors import PusherConfigError

    monkeypatch.chdir(tmp_path)
    model = scaled_saved_model(str(tmp_path / "m"))
    with pytest.raises(PusherConfigError, match=r"gs://bucket/serving: .*Push to s3://, or "
                       r"to a folder the server mounts"):
        serving.push(model, "gs://bucket/serving", "ctr")
    with pytest.raises(PusherConfigError, match=r"conditional writes"):
        serving.rollback("gs://bucket/serving", "ctr", 1)
    assert sorted(os.listdir(tmp_path)) == ["m"]  # no local folder named "gs:"


def test_s3_missing_bucket_is_a_refusal_naming_the_path(s3_server):
    import pytest

    from tfx_bridge.storage.objectstore import ObjectStoreError

    with pytest.raises(ObjectStoreError, match=r"s3://no-such-bucket-here/x: NoSuchBucket .*"
                       r"Check the bucket name"):
        fs.listdir("s3://no-such-bucket-here/x")
    with pytest.raises(ObjectStoreError, match=r"NoSuchBucket"):
        list(fs.walk("s3://no-such-bucket-here/x"))
