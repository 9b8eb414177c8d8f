"""The compiled Kubeflow spec, executed task by task under the Kubeflow entrypoints."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge import fs, schemas  # noqa: E402
from tfx_bridge.kubeflow import compile as kfp_compile  # noqa: E402
from tfx_bridge.kubeflow import local_run  # noqa: E402
from tfx_bridge.pipelines import demo_data, train_demo_model  # noqa: E402


@pytest.mark.slow
def test_compiled_spec_runs_under_kubeflow_entrypoints_on_s3(tmp_path, s3_bucket):
    """As on Kubeflow with MinIO: pipeline root, data, research folder and serving
    base path on s3://, every task a separate process under the compiled command
    (the entrypoint registers s3 for stock components and exits cleanly). The
    Evaluator is left out to keep the suite's time (it runs on s3 in the
    LocalDagRunner test, tests/objectstore/test_s3_pipeline.py)."""
    data = fs.join(s3_bucket, "data")
    spans = demo_data.write_demo_spans(data, spans=[1, 2], rows_per_span=300)
    research = fs.join(s3_bucket, "research")
    train_demo_model.train(spans[-1], research, steps=60)
    root, serving = fs.join(s3_bucket, "root"), fs.join(s3_bucket, "serving")
    spec = kfp_compile.compile_pipeline(
        str(tmp_path / "pipeline.json"), root, data, research, serving,
        schema_path=schemas.path(schemas.DEMO_SCHEMA),
        contract_path=schemas.path(schemas.DEMO_CONTRACT), evaluate=False,
        optimizer_iterations=10)
    job = json.loads(open(spec).read())
    executors = job["pipelineSpec"]["deploymentSpec"]["executors"]
    gen = executors["ParquetExampleGen_executor"]["container"]
    assert gen["command"] == [*kfp_compile.ENTRYPOINT, kfp_compile.EXECUTOR_MODULE]
    assert gen["lifecycle"]["preCacheCheck"]["command"] == [
        *kfp_compile.ENTRYPOINT, "tfx.orchestration.kubeflow.v2.file_based_example_gen.driver"]
    outputs = local_run.run_compiled(spec, str(tmp_path / "kfp"))
    examples = outputs["ParquetExampleGen"]["examples"][0]
    assert examples["uri"].startswith(root + "/")
    # The stock driver resolved {SPAN}; span is a declared Examples property too,
    # so the custom one travels as "custom:span".
    assert examples["metadata"]["custom:span"] == 2
    assert fs.glob(fs.join(examples["uri"], "Split-train", "*.gz"))
    assert outputs["SchemaGuard"]["anomalies"][0]["metadata"]["blessed"] == 1
    assert outputs["PyTorchModelImporter"]["model"][0]["metadata"]["blessed"] == 1
    pushed = outputs["ServingPusher"]["pushed_model"][0]["metadata"]
    assert pushed["pushed"] == 1, json.dumps(pushed)
    assert pushed["pushed_destination"] == fs.join(serving, "ctr", "1")
    assert fs.isfile(fs.join(pushed["pushed_destination"], "saved_model.pb"))
    assert fs.isfile(fs.join(serving, "models.config"))
