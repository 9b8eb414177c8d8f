"""The compiled Kubeflow spec, executed task by task under the Kubeflow entrypoints."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge import schemas  # noqa: E402
from tfx_bridge.kubeflow import compile as kfp_compile  # noqa: E402
from tfx_bridge.kubeflow import local_run  # noqa: E402
from tfx_bridge.pipelines import demo_data, train_demo_model  # noqa: E402


@pytest.mark.slow
def test_compiled_spec_runs_under_kubeflow_entrypoints(tmp_path):
    data = str(tmp_path / "data")
    spans = demo_data.write_demo_spans(data, spans=[1, 2], rows_per_span=300)
    research = str(tmp_path / "research")
    train_demo_model.train(spans[-1], research, steps=60)
    spec = kfp_compile.compile_pipeline(
        str(tmp_path / "pipeline.json"), str(tmp_path / "root"), data, research,
        str(tmp_path / "serving"), schema_path=schemas.path(schemas.DEMO_SCHEMA),
        contract_path=schemas.path(schemas.DEMO_CONTRACT))
    outputs = local_run.run_compiled(spec, str(tmp_path / "kfp"))
    examples = outputs["ParquetExampleGen"]["examples"][0]
    # The stock driver resolved {SPAN}; span is a declared Examples property too,
    # so the custom one travels as "custom:span".
    assert examples["metadata"]["custom:span"] == 2
    assert outputs["SchemaGuard"]["anomalies"][0]["metadata"]["blessed"] == 1
    assert outputs["PyTorchModelImporter"]["model"][0]["metadata"]["blessed"] == 1
    assert outputs["latest_blessed_model-model-resolver"]["model"] == []
    pushed = outputs["ServingPusher"]["pushed_model"][0]["metadata"]
    assert pushed["pushed"] == 1, json.dumps(pushed)
    assert os.path.exists(os.path.join(pushed["pushed_destination"], "saved_model.pb"))
    assert os.path.exists(tmp_path / "serving" / "models.config")
