"""SchemaGuard as a TFX component: LocalDagRunner runs, blessing, Kubeflow compile."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfx_bridge import schemas
from tfx_bridge.components.schema_guard import SchemaGuard, report
from tfx_bridge.components.schema_guard.errors import AnomaliesFound, SchemaGuardConfigError
from tfx_bridge.pipelines import demo_data, runner
from tfx_bridge.pipelines import pipeline as pipelines


def _planted_span(root: str, span: int = 3) -> None:
    """A span whose item_id is int64 at the source with values past int32."""
    table = demo_data.make_span_table(span, 400)
    item = np.asarray(table.column("item_id")).astype(np.int64)
    item[[5, 77]] = 3_000_000_000
    table = table.set_column(table.schema.get_field_index("item_id"), "item_id",
                             pa.array(item, pa.int64()))
    folder = os.path.join(root, f"span-{span}")
    os.makedirs(folder, exist_ok=True)
    pq.write_table(table, os.path.join(folder, "part-0.parquet"))


def _planted_pipeline(tmp_path, name: str, **options):
    """The data pipeline over one planted span, checked against the demo contract."""
    data = str(tmp_path / "data")
    _planted_span(data)
    return pipelines.create_data_pipeline(
        name, str(tmp_path / "root"), data, metadata_path=str(tmp_path / "m.sqlite"),
        contract_path=schemas.path(schemas.DEMO_CONTRACT), **options)


@pytest.mark.slow
def test_pipeline_schema_guard_clean_on_demo_data(demo_run):
    assert demo_run["schema_guard_blessed"] == 1
    assert demo_run["schema_guard_findings"] == 0
    with open(os.path.join(demo_run["anomalies_uri"], report.FINDINGS_FILE)) as f:
        doc = json.load(f)
    assert doc["blessed"] is True and sum(doc["records"].values()) == 600
    for split in ("train", "eval"):
        assert os.path.exists(os.path.join(demo_run["anomalies_uri"], f"Split-{split}",
                                           report.ANOMALIES_FILE))


@pytest.mark.slow
def test_pipeline_planted_mismatch_stops_at_schema_guard(tmp_path):
    p = _planted_pipeline(tmp_path, "planted")
    with pytest.raises(AnomaliesFound) as info:
        runner.run_local(p)
    msg = str(info.value)
    assert "feature 'item_id' (data_vs_consumer.range)" in msg
    assert "= [3000000000]" in msg and "would wrap silently" in msg
    assert "feature 'item_id' (source_vs_consumer.narrowing)" in msg
    # Nothing after SchemaGuard ran, and its failed execution published nothing.
    assert not runner.latest_artifacts(str(tmp_path / "m.sqlite"), "ExampleAnomalies")


@pytest.mark.slow
def test_pipeline_fail_on_anomalies_off_records_not_blessed(tmp_path):
    runner.run_local(_planted_pipeline(tmp_path, "recorded", fail_on_anomalies=False,
                                       schema_path=schemas.path(schemas.DEMO_SCHEMA)))
    artifact = runner.latest_artifacts(str(tmp_path / "m.sqlite"), "ExampleAnomalies")[0]
    assert artifact.custom_properties["blessed"].int_value == 0
    with open(os.path.join(artifact.uri, report.FINDINGS_FILE)) as f:
        doc = json.load(f)
    checks = {(x["check"], x["feature"]) for x in doc["findings"]}
    # The curated schema's int_domain catches it too, besides the consumer contract.
    assert ("data_vs_schema.domain", "item_id") in checks
    assert ("data_vs_consumer.range", "item_id") in checks


def test_component_missing_relative_contract_file_refused(tmp_path, monkeypatch):
    from tfx.types import channel, standard_artifacts
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SchemaGuardConfigError, match=r"contract file 'nope.yaml' does not"):
        SchemaGuard(examples=channel.Channel(type=standard_artifacts.Examples),
                    schema=channel.Channel(type=standard_artifacts.Schema),
                    contract_path="nope.yaml")


@pytest.mark.slow
def test_kubeflow_v2_compile_with_schema_guard(tmp_path):
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

    p = pipelines.create_data_pipeline("kfp-data", "gs://bucket/root", "gs://bucket/data",
                                       contract_path="gs://bucket/demo.contract.yaml",
                                       content_identity=False)
    kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
            default_image="example.com/tfx-bridge:test"),
        output_dir=str(tmp_path), output_filename="pipeline.json").run(p)
    spec = json.loads((tmp_path / "pipeline.json").read_text())["pipelineSpec"]
    container = spec["deploymentSpec"]["executors"]["SchemaGuard_executor"]["container"]
    assert "tfx_bridge.components.schema_guard.executor.Executor" in container["args"]
    assert spec["root"]["dag"]["tasks"]["SchemaGuard"]["dependentTasks"] == [
        "ParquetExampleGen", "SchemaGen"]
