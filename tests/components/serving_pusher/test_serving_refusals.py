"""ServingPusher's core refuses, before writing anything: model names that are not one
safe folder, symlinks out of the model, corrupt or stale push state, bad arguments, a
base path that is a file, a mistyped rollback."""
from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tfx_bridge.components.serving_pusher import base_layout, serving, state
from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.errors import PusherConfigError


@pytest.mark.parametrize("name", ["../evil", "a/b", "", "ok name", "/abs", ".hidden",
                                  "-flag", "x" * 129, "7"])
def test_push_model_name_not_a_safe_folder_refused_nothing_written(models, tmp_path, name):
    base = tmp_path / "serving"
    # "7" is a safe folder but a version number to TF Serving: the pusher's own refusal.
    with pytest.raises(PusherConfigError,
                       match=r"Model name .* (cannot be used as a folder name|is a number)"):
        serving.push(models["a"], PusherConfig(str(base), name))
    assert os.listdir(tmp_path) == []  # no folder made, inside or outside the base


def test_push_symlink_leading_out_of_the_model_refused(models, tmp_path):
    import shutil

    model = str(tmp_path / "m")
    shutil.copytree(models["a"], model)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    os.symlink(secret, os.path.join(model, "assets", "leak.txt"))
    result = serving.push(model, PusherConfig(str(tmp_path / "serving"), "ctr"))
    assert not result.pushed
    assert f"assets/leak.txt -> {secret} (outside the folder)" in result.reason
    assert state.versions(str(tmp_path / "serving" / "ctr")) == []


def test_push_in_folder_symlinked_variables_copied_and_loadable(models, tmp_path):
    import shutil

    model = str(tmp_path / "m")
    shutil.copytree(models["a"], model)
    os.rename(os.path.join(model, "variables"), os.path.join(model, "real_variables"))
    os.symlink("real_variables", os.path.join(model, "variables"))
    result = serving.push(model, PusherConfig(str(tmp_path / "serving"), "ctr"))
    assert result.pushed, result.reason
    version = os.path.join(tmp_path / "serving" / "ctr", "1")
    assert os.path.isdir(os.path.join(version, "variables"))
    assert not os.path.islink(os.path.join(version, "variables"))  # copied as what it was
    out = tf.saved_model.load(version).signatures["serving_default"](
        x=tf.ones([2, 4], tf.float32))
    np.testing.assert_allclose(out["score"].numpy(), [8.0, 8.0])


@pytest.mark.parametrize("state_text,needle", [
    ('{"labels": {"stable": 1', "is not a valid push state"),
    ('{"labels": {"stable": 99}, "last_version": 1}',
     "label 'stable' names version 99, which is not under"),
])
def test_push_corrupt_or_stale_state_refused_before_publishing(models, tmp_path, state_text,
                                                               needle):
    base = tmp_path / "serving"
    assert serving.push(models["a"], PusherConfig(str(base), "ctr")).pushed
    (base / "ctr" / base_layout.STATE_FILE).write_text(state_text)
    config = (base / base_layout.MODELS_CONFIG).read_text()
    with pytest.raises(PusherConfigError, match=needle + r".*Repair or remove"):
        serving.push(models["b"], PusherConfig(str(base), "ctr"))
    # Another model's push is stopped too, before anything of it is written.
    with pytest.raises(PusherConfigError, match=needle):
        serving.push(models["b"], PusherConfig(str(base), "other"))
    assert not (base / "other").exists() and state.versions(str(base / "ctr")) == [1]
    assert (base / base_layout.MODELS_CONFIG).read_text() == config


@pytest.mark.parametrize("settings,kwargs,needle", [
    ({"keep_versions": 0}, {}, r"keep_versions must be >= 1"),
    ({}, {"examples_dir": "/no/such/examples"},
     r"Examples folder /no/such/examples does not exist"),
    ({"batching_parameters": {"max_batch": 3}}, {}, r"unknown batching fields \['max_batch'\]"),
])
def test_push_bad_argument_refused_before_publishing(models, tmp_path, settings, kwargs,
                                                     needle):
    base = tmp_path / "serving"
    assert serving.push(models["a"], PusherConfig(str(base), "ctr")).pushed
    with pytest.raises(PusherConfigError, match=needle):
        serving.push(models["b"], PusherConfig(str(base), "ctr", **settings), **kwargs)
    assert state.versions(str(base / "ctr")) == [1]


def test_push_base_path_that_is_a_file_refused(models, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PusherConfigError, match=r"Base path .* is a file"):
        serving.push(models["a"], PusherConfig(str(tmp_path / "file"), "ctr"))


def test_rollback_mistyped_model_name_writes_nothing(models, tmp_path):
    base = tmp_path / "serving"
    assert serving.push(models["a"], PusherConfig(str(base), "ctr")).pushed
    before = sorted(str(p) for p in base.rglob("*"))
    with pytest.raises(PusherConfigError, match=r"No pushed model 'crt' under .*Nothing was"):
        serving.rollback(str(base), "crt", 1)
    assert sorted(str(p) for p in base.rglob("*")) == before
