"""ServingPusher at the end of a LocalDagRunner pipeline: pushes, or says why not."""
from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf
from tfx import v1 as tfx

from tfx_bridge.components import ServingPusher
from tfx_bridge.components.serving_pusher.errors import PusherConfigError
from tfx_bridge.pipelines import runner


def _model_folder(folder) -> str:
    """A tiny hand-built Model artifact folder: the pusher does not care which model."""
    class Scale(tf.Module):
        def __init__(self):
            self.w = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
        def serve(self, x):
            return {"logits": x * self.w}

    module = Scale()
    tf.saved_model.save(module, str(folder / "Format-Serving"),
                        signatures={"serving_default": module.serve})
    return str(folder)


def _pipeline(tmp_path, name: str, blessed: int):
    model = tfx.dsl.Importer(source_uri=_model_folder(tmp_path / "model"),
                             artifact_type=tfx.types.standard_artifacts.Model,
                             custom_properties={"blessed": blessed}).with_id("model")
    pusher = ServingPusher(model=model.outputs["result"], base_path=str(tmp_path / "serving"),
                           model_name="mlp", warmup_records=3)
    metadata = str(tmp_path / f"{name}.sqlite")
    return tfx.dsl.Pipeline(
        pipeline_name=name, pipeline_root=str(tmp_path / "root"), components=[model, pusher],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            metadata)), metadata


@pytest.mark.slow
def test_pipeline_ending_in_serving_pusher_pushes(tmp_path):
    p, metadata = _pipeline(tmp_path, "push-ok", blessed=1)
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
    p, metadata = _pipeline(tmp_path, "push-refused", blessed=0)
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
    with pytest.raises(PusherConfigError, match=r"Model name .7. is a number: TF Serving reads"):
        ServingPusher(model=channel.Channel(type=standard_artifacts.Model), base_path="/s",
                      model_name="7")


@pytest.mark.parametrize("records", [0, 1001])
def test_component_warmup_records_out_of_range_refused_at_build(records):
    from tfx.types import channel, standard_artifacts
    with pytest.raises(PusherConfigError, match=rf"warmup_records {records}: use 1 to 1000"):
        ServingPusher(model=channel.Channel(type=standard_artifacts.Model), base_path="/s",
                      model_name="ctr", warmup_records=records)
