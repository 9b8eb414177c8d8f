"""What ServingPusher's core checks before it publishes (contract, target, blessings,
a loadable model, model.tflite, an identical model) and the configs and manifest it writes."""
from __future__ import annotations

import os

import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from tfx_bridge.artifacts import savedmodel
from tfx_bridge.components.serving_pusher import base_layout, checks, server_config, serving, state
from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.errors import PusherConfigError, PushRefused


def test_push_contract_change_refused_naming_input(models, tmp_path):
    base = str(tmp_path / "serving")
    assert serving.push(models["a"], PusherConfig(base, "ctr")).pushed
    renamed = serving.push(models["renamed"], PusherConfig(base, "ctr"))
    assert not renamed.pushed and "input 'x' (float32) was removed or renamed" in renamed.reason
    retyped = serving.push(models["int"], PusherConfig(base, "ctr"))
    assert not retyped.pushed and "input 'x' changed dtype float32 -> int64" in retyped.reason
    assert state.versions(os.path.join(base, "ctr")) == [1]
    allowed = serving.push(models["renamed"],
                           PusherConfig(base, "ctr", allow_contract_change=True))
    assert allowed.pushed and allowed.version == 2


def test_push_gpu_model_to_cpu_target_refused(models, tmp_path):
    result = serving.push(models["a"], PusherConfig(str(tmp_path / "s"), "ctr",
                                                            target="cpu"), requires_gpu=True)
    assert not result.pushed and "TRTEngineOp" in result.reason
    assert not os.path.exists(tmp_path / "s" / "ctr" / "1")


def test_push_unblessed_gate_pushes_nothing(models, tmp_path):
    result = serving.push(models["a"], PusherConfig(str(tmp_path / "s"), "ctr"),
                          blessings={"SchemaGuard": 0, "Evaluator (ModelBlessing)": 1})
    assert not result.pushed and result.reason == "not blessed by SchemaGuard; nothing pushed"
    assert not os.path.exists(tmp_path / "s" / "ctr")


def test_contract_changes_lists_every_break():
    old = {"inputs": {"a": {"dtype": "int64", "shape": [None]},
                      "b": {"dtype": "float32", "shape": [None, 3]}},
           "outputs": {"score": {"dtype": "float32", "shape": [None]}}}
    new = {"inputs": {"a": {"dtype": "int32", "shape": [None]},
                      "b": {"dtype": "float32", "shape": [None, 4]}},
           "outputs": {"prob": {"dtype": "float32", "shape": [None]}}}
    problems = checks.contract_changes(old, new)
    assert len(problems) == 3
    assert any("changed dtype int64 -> int32" in p for p in problems)
    assert any("changed shape [None, 3] -> [None, 4]" in p for p in problems)
    assert any("output 'score' was removed" in p for p in problems)


def test_batching_unknown_field_refused():
    with pytest.raises(PusherConfigError, match=r"Unknown batching fields \['max_batch'\]"):
        server_config.batching_text("cpu", {"max_batch": 3})


def test_inspect_unloadable_model_refused(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "saved_model.pb").write_bytes(b"not a proto")
    with pytest.raises(PushRefused, match=r"does not load in a fresh process"):
        checks.inspect_model(str(tmp_path / "bad"))


def test_push_identical_model_adds_no_version(models, tmp_path):
    base = str(tmp_path / "serving")
    first = serving.push(models["a"], PusherConfig(base, "ctr"))
    again = serving.push(models["a"], PusherConfig(base, "ctr"))
    assert again.pushed and again.version == first.version == 1
    assert "no new version" in again.reason
    assert state.versions(os.path.join(base, "ctr")) == [1]
    # A changed model does.
    assert serving.push(models["b"], PusherConfig(base, "ctr")).version == 2


def test_push_identical_model_repairs_configs_of_interrupted_push(models, tmp_path):
    # A push killed after publishing but before the configs were written left the
    # model out of models.config; re-pushing the same model must put it back.
    base = tmp_path / "serving"
    serving.push(models["a"], PusherConfig(str(base), "ctr"))
    config = (base / base_layout.MODELS_CONFIG).read_text()
    (base / base_layout.MODELS_CONFIG).write_text("model_config_list {\n}\n")
    again = serving.push(models["a"], PusherConfig(str(base), "ctr"))
    assert again.version == 1 and "no new version" in again.reason
    assert (base / base_layout.MODELS_CONFIG).read_text() == config


def _with_tflite(source: str, folder: str, tflite_from: str) -> str:
    """``source`` copied, plus ``model.tflite`` converted from ``tflite_from``."""
    import shutil

    shutil.copytree(source, folder)
    converter = tf.lite.TFLiteConverter.from_saved_model(tflite_from,
                                                         signature_keys=["serving_default"])
    with open(os.path.join(folder, savedmodel.TFLITE_FILE), "wb") as f:
        f.write(converter.convert())
    return folder


def test_push_tflite_model_warmed_through_tflite_and_flag_in_manifest(models, tmp_path):
    model = _with_tflite(models["a"], str(tmp_path / "lite"), models["a"])
    base = str(tmp_path / "serving")
    result = serving.push(model, PusherConfig(base, "ctr", warmup_records=4),
                          serving_flags=[savedmodel.TFLITE_FLAG])
    assert result.pushed, result.reason
    assert result.details["warmup"]["tflite"]["requests"] == 4  # replayed through model.tflite
    assert os.path.exists(os.path.join(base, "ctr", "1", savedmodel.TFLITE_FILE))
    manifest = os.path.join(base, base_layout.K8S_MANIFEST)
    assert f"- {savedmodel.TFLITE_FLAG}" in open(manifest).read()
    # A later push that needs no flag, and a rollback, keep the flag: version 1 needs it.
    assert serving.push(models["b"], PusherConfig(base, "ctr")).pushed
    serving.rollback(base, "ctr", 1)
    assert server_config.server_flags(base) == [savedmodel.TFLITE_FLAG]
    manifest = os.path.join(base, base_layout.K8S_MANIFEST)
    assert f"- {savedmodel.TFLITE_FLAG}" in open(manifest).read()


def test_push_tflite_not_matching_savedmodel_refused(models, tmp_path):
    # model.tflite converted from a model whose input is named "features", not "x".
    model = _with_tflite(models["a"], str(tmp_path / "lite"), models["renamed"])
    result = serving.push(model, PusherConfig(str(tmp_path / "serving"), "ctr"))
    assert not result.pushed
    assert "model.tflite does not match the SavedModel's serving_default" in result.reason
    assert "'features'" in result.reason


def test_push_unknown_serving_flag_refused(models, tmp_path):
    with pytest.raises(PusherConfigError, match=r"flags \['--enable_magic'\].*known"):
        serving.push(models["a"], PusherConfig(str(tmp_path / "serving"), "ctr"),
                     serving_flags=["--enable_magic"])


def test_models_config_base_paths_agree_with_manifest_mount(models, tmp_path):
    import yaml

    base = str(tmp_path / "serving")
    assert serving.push(models["a"], PusherConfig(base, "ctr")).pushed
    assert serving.push(models["int"], PusherConfig(base, "ids")).pushed
    config = text_format.Parse(open(os.path.join(base, base_layout.MODELS_CONFIG)).read(),
                               model_server_config_pb2.ModelServerConfig())
    deployment, service = yaml.safe_load_all(open(os.path.join(base, base_layout.K8S_MANIFEST)))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    mount = container["volumeMounts"][0]["mountPath"]
    volume = deployment["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"]
    assert volume == os.path.abspath(base) and service["kind"] == "Service"
    # What the server reads, where the manifest mounts it.
    assert {c.name: c.base_path for c in config.model_config_list.config} == {
        "ctr": f"{mount}/ctr", "ids": f"{mount}/ids"}
    assert f"--model_config_file={mount}/{base_layout.MODELS_CONFIG}" in container["args"]
    for c in config.model_config_list.config:  # and each one is there on the host
        assert state.versions(os.path.join(volume, os.path.relpath(c.base_path, mount)))


def test_rollback_keeps_the_gpu_deployment_and_batching(models, tmp_path):
    import yaml

    base = str(tmp_path / "serving")
    overrides = {"max_batch_size": 64}
    config = PusherConfig(base, "ctr", target="gpu", batching_parameters=overrides)
    assert serving.push(models["a"], config).pushed
    assert serving.push(models["b"], config).pushed
    batching = open(os.path.join(base, base_layout.BATCHING_FILE)).read()
    serving.rollback(base, "ctr", 1)
    deployment = next(yaml.safe_load_all(open(os.path.join(base, base_layout.K8S_MANIFEST))))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == base_layout.SERVING_IMAGE["gpu"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert open(os.path.join(base, base_layout.BATCHING_FILE)).read() == batching
    assert "value: 64" in batching
