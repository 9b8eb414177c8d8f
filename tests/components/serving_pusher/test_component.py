"""ServingPusher at the end of a LocalDagRunner pipeline: pushes, or says why not."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx import v1 as tfx  # noqa: E402

from tfx_bridge.components import PyTorchModelImporter, ServingPusher  # noqa: E402
from tfx_bridge.components.serving_pusher.errors import PusherConfigError  # noqa: E402
from tfx_bridge.pipelines import demo_models, runner  # noqa: E402


def _pipeline(tmp_path, name: str, atol: float):
    weights = str(tmp_path / "mlp.pt")
    torch.save(demo_models.build("mlp").state_dict(), weights)
    _, _, inputs, outputs = demo_models.REFERENCE_MODELS["mlp"]
    importer = PyTorchModelImporter(
        source_kind="state_dict", source_path=weights,
        module_class="tfx_bridge.pipelines.demo_models:MLP", inputs=inputs,
        output_names=outputs, atol=atol, fail_on_not_equivalent=False)
    pusher = ServingPusher(model=importer.outputs["model"], base_path=str(tmp_path / "serving"),
                           model_name="mlp", warmup_records=3)
    metadata = str(tmp_path / f"{name}.sqlite")
    return tfx.dsl.Pipeline(
        pipeline_name=name, pipeline_root=str(tmp_path / "root"), components=[importer, pusher],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            metadata)), metadata


@pytest.mark.slow
def test_pipeline_ending_in_serving_pusher_pushes(tmp_path):
    p, metadata = _pipeline(tmp_path, "push-ok", atol=1e-4)
    runner.run_local(p)
    pushed = runner.latest_artifacts(metadata, "PushedModel")[0]
    props = pushed.custom_properties
    assert props["pushed"].int_value == 1
    assert props["pushed_version"].string_value == "1"
    destination = props["pushed_destination"].string_value
    assert destination == str(tmp_path / "serving" / "mlp" / "1")
    assert os.path.exists(os.path.join(destination, "assets.extra", "tf_serving_warmup_requests"))
    assert os.path.exists(tmp_path / "serving" / "models.config")


@pytest.mark.slow
def test_pipeline_unblessed_model_pushes_nothing_and_says_why(tmp_path):
    p, metadata = _pipeline(tmp_path, "push-refused", atol=0.0)  # nothing is bit-exact
    runner.run_local(p)
    model = runner.latest_artifacts(metadata, "Model")[0]
    assert model.custom_properties["blessed"].int_value == 0
    pushed = runner.latest_artifacts(metadata, "PushedModel")[0]
    assert pushed.custom_properties["pushed"].int_value == 0
    reason = pushed.custom_properties["push_reason"].string_value
    assert reason.startswith("not blessed by the model") and "nothing pushed" in reason
    assert not os.path.exists(tmp_path / "serving" / "mlp")
    with open(os.path.join(pushed.uri, "push.json")) as f:
        assert json.load(f)["pushed"] is False


def test_component_numeric_model_name_refused():
    from tfx.types import channel, standard_artifacts
    with pytest.raises(PusherConfigError, match=r"must be a folder name, not a number"):
        ServingPusher(model=channel.Channel(type=standard_artifacts.Model), base_path="/s",
                      model_name="7")
