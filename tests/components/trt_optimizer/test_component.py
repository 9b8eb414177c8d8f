"""TrtOptimizer in a LocalDagRunner pipeline after PyTorchModelImporter."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx import v1 as tfx  # noqa: E402

from tfx_bridge.artifacts import properties  # noqa: E402
from tfx_bridge.components import PyTorchModelImporter, TrtOptimizer  # noqa: E402
from tfx_bridge.components.trt_optimizer import candidates  # noqa: E402
from tfx_bridge.components.trt_optimizer.errors import OptimizerConfigError  # noqa: E402
from tfx_bridge.pipelines import demo_models, runner  # noqa: E402


@pytest.mark.slow
def test_pipeline_importer_then_optimizer_records_backend(tmp_path):
    weights = str(tmp_path / "transformer.pt")
    torch.save(demo_models.build("transformer").state_dict(), weights)
    _, _, inputs, outputs = demo_models.REFERENCE_MODELS["transformer"]
    importer = PyTorchModelImporter(
        source_kind="state_dict", source_path=weights,
        module_class="tfx_bridge.pipelines.demo_models:TinyTransformer",
        inputs=inputs, output_names=outputs)
    optimizer = TrtOptimizer(model=importer.outputs["model"], iterations=30)
    metadata = str(tmp_path / "m.sqlite")
    p = tfx.dsl.Pipeline(
        pipeline_name="import-optimize", pipeline_root=str(tmp_path / "root"),
        components=[importer, optimizer],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            metadata))
    runner.run_local(p)
    model = [m for m in runner.latest_artifacts(metadata, "Model") if "TrtOptimizer" in m.uri][0]
    props = model.custom_properties
    assert props["blessed"].int_value == 1
    assert props["backend"].string_value in candidates.CPU_BACKENDS
    assert props["requires_gpu"].int_value == 0
    assert props["precision"].string_value == "fp32"
    with open(os.path.join(model.uri, "report.json")) as f:
        report = json.load(f)
    largest = f"p50_ms_batch_{max(report['batches'])}"
    # What MLMD holds is the number measured, every digit of it.
    assert properties.get_float(model, "latency_p50_ms_before") == \
        report["latency_before_ms"][largest]
    assert properties.get_float(model, "latency_p50_ms_after") == \
        report["latency_after_ms"][largest]
    assert report["tensorrt"]["ran"] is False and report["tensorrt"]["why_not"]
    assert os.path.exists(os.path.join(model.uri, "Format-Serving", "saved_model.pb"))


def test_component_bad_precision_refused():
    from tfx.types import channel, standard_artifacts
    with pytest.raises(OptimizerConfigError, match=r"precision 'bf16'"):
        TrtOptimizer(model=channel.Channel(type=standard_artifacts.Model), precision="bf16")


def test_component_unknown_candidate_refused():
    from tfx.types import channel, standard_artifacts
    with pytest.raises(OptimizerConfigError, match=r"unknown candidates \['tvm'\]"):
        TrtOptimizer(model=channel.Channel(type=standard_artifacts.Model),
                     candidates=["tflite", "tvm"])
