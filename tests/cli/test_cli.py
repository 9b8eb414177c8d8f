"""The ``tfx-bridge`` console script, run as a user runs it (a subprocess)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfx_bridge import cli


def _run(*args, cwd=None):
    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def _last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def test_cli_ingest_json_summary_last_line(tmp_path):
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": pa.array(range(300), pa.int32()),
                             "tags": pa.array([["a"]] * 300, pa.list_(pa.string()))}),
                   str(tmp_path / "in" / "p.parquet"))
    proc = _run("ingest", "--input-base", str(tmp_path / "in"), "--output",
                str(tmp_path / "out"), "--splits", "train:3,eval:1", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = _last_json(proc.stdout)
    assert summary["ok"] is True and summary["rows"] == 300
    assert sum(summary["splits"].values()) == 300 and set(summary["splits"]) == {"train", "eval"}
    assert summary["columns"] == {"id": "int64_list", "tags": "bytes_list"}
    assert os.path.isdir(tmp_path / "out" / "Split-train")
    assert "[1/3] Planned 300 rows" in proc.stderr


def test_cli_ingest_bad_input_one_line_exit_2(tmp_path):
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"s": pa.array([{"a": 1}])}), str(tmp_path / "in" / "p.parquet"))
    proc = _run("ingest", "--input-base", str(tmp_path / "in"), "--output",
                str(tmp_path / "out"), "--json")
    assert proc.returncode == cli.EXIT_BAD_INPUT
    assert "Traceback" not in proc.stderr
    assert "Column 's' in p.parquet" in proc.stderr and "flatten" in proc.stderr
    summary = _last_json(proc.stdout)
    assert summary["ok"] is False and summary["error_type"] == "ParquetSchemaError"


def test_cli_bad_split_spec_exit_2_in_process(tmp_path, capsys):
    code = cli.main(["ingest", "--input-base", str(tmp_path), "--output", str(tmp_path / "o"),
                     "--splits", "train", "--quiet"])
    assert code == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "Bad split 'train'" in err and "Traceback" not in err


def _ingest_demo(tmp_path, table=None):
    from tfx_bridge.pipelines import demo_data
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(table if table is not None else demo_data.make_span_table(1, 300),
                   str(src / "p.parquet"))
    proc = _run("ingest", "--input-base", str(src), "--output", str(tmp_path / "ex"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return str(tmp_path / "ex")


def test_cli_validate_clean_exit_0(tmp_path):
    from tfx_bridge import schemas
    examples = _ingest_demo(tmp_path)
    proc = _run("validate", "--examples", examples, "--schema",
                schemas.path(schemas.DEMO_SCHEMA), "--contract",
                schemas.path(schemas.DEMO_CONTRACT), "--output", str(tmp_path / "v"), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = _last_json(proc.stdout)
    assert summary["blessed"] is True and sum(summary["records"].values()) == 300
    assert (tmp_path / "v" / "report.html").exists()


@pytest.fixture(scope="module")
def float_hour_examples(tmp_path_factory):
    """Demo rows ingested with 'hour' as floats: the schema says INT (a wire-kind break)."""
    from tfx_bridge.pipelines import demo_data
    table = demo_data.make_span_table(1, 300)
    hour = pa.array([float(h) + 0.5 for h in table.column("hour").to_pylist()], pa.float32())
    table = table.set_column(table.schema.get_field_index("hour"), "hour", hour)
    return _ingest_demo(tmp_path_factory.mktemp("float-hour"), table)


def test_cli_validate_findings_exit_1_with_summary(tmp_path, float_hour_examples):
    from tfx_bridge import schemas
    examples = float_hour_examples
    proc = _run("validate", "--examples", examples, "--schema",
                schemas.path(schemas.DEMO_SCHEMA), "--contract",
                schemas.path(schemas.DEMO_CONTRACT), "--output", str(tmp_path / "v"), "--json")
    assert proc.returncode == cli.EXIT_CHECK_FAILED, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "feature 'hour' (data_vs_schema.wire_kind): expected int64_list" in proc.stdout
    summary = _last_json(proc.stdout)
    assert summary["blessed"] is False and "data_vs_schema.wire_kind" in summary["checks"]


def test_cli_validate_on_a_terminal_prints_a_findings_table(tmp_path, capfd, monkeypatch,
                                                           float_hour_examples):
    from tfx_bridge import schemas
    from tfx_bridge.cli import data as data_verbs
    examples = float_hour_examples
    capfd.readouterr()
    monkeypatch.setattr(data_verbs, "_is_terminal", lambda: True)
    code = cli.main(["validate", "--examples", examples, "--schema",
                     schemas.path(schemas.DEMO_SCHEMA), "--output", str(tmp_path / "v"),
                     "--quiet"])
    out = capfd.readouterr().out
    assert code == cli.EXIT_CHECK_FAILED
    lines = out.splitlines()
    assert lines[1].split() == ["split", "feature", "check", "expected", "actual", "records"]
    assert any(ln.split()[1:3] == ["hour", "data_vs_schema.wire_kind"] for ln in lines[3:])
    assert "- [" not in out  # the prose lines stay in report.md


def test_cli_validate_bad_schema_exit_2(tmp_path, capfd):
    bad = tmp_path / "s.pbtxt"
    bad.write_text("feature { nme: 'x' }")
    (tmp_path / "ex" / "Split-train").mkdir(parents=True)
    code = cli.main(["validate", "--examples", str(tmp_path / "ex"), "--schema", str(bad),
                     "--output", str(tmp_path / "o"), "--quiet"])
    assert code == cli.EXIT_BAD_INPUT
    err = capfd.readouterr().err
    assert f"Schema {bad} is not a TFMD Schema text proto" in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_compile_kfp_writes_spec_with_our_executors(tmp_path):
    """Compiled without torch: a CI box or laptop without the [onnx] extra can compile."""
    out = tmp_path / "pipeline.json"
    code = ("import sys\n"
            "sys.modules['torch'] = None  # as if not installed\n"
            "from tfx_bridge import cli\n"
            f"sys.exit(cli.main(['compile-kfp', '--output', {str(out)!r}, '--pipeline-root', "
            "'gs://b/root', '--data-root', 'gs://b/data', '--image', 'r.example/tfx-bridge:1', "
            "'--json']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spec = json.loads(out.read_text())["pipelineSpec"]
    tasks = set(spec["root"]["dag"]["tasks"])
    assert {"ParquetExampleGen", "SchemaGuard", "Transform", "PyTorchTrainer",
            "PyTorchModelImporter", "TrtOptimizer", "Evaluator", "ServingPusher",
            "latest_blessed_model-model-resolver"} <= tasks
    assert "research_model" not in tasks  # training mode by default
    args = " ".join(" ".join(e["container"].get("args", []))
                    for e in spec["deploymentSpec"]["executors"].values() if "container" in e)
    for component in ("schema_guard", "pytorch_trainer", "pytorch_model_importer",
                      "trt_optimizer", "serving_pusher", "parquet_example_gen"):
        assert f"tfx_bridge.components.{component}.executor.Executor" in args
