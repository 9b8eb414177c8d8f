"""ServingPusher's core: atomic versions under SIGKILL, concurrency, contracts, configs."""
from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.apis import prediction_log_pb2
from tensorflow_serving.config import model_server_config_pb2

from tfx_bridge.components.serving_pusher import serving
from tfx_bridge.components.serving_pusher.errors import PusherConfigError, PushRefused
from tfx_bridge.storage.names import UnsafeNameError


def _save_model(path: str, input_name: str = "x", dtype=tf.float32, scale: float = 2.0,
                asset_mb: int = 0) -> str:
    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(scale)

        @tf.function(input_signature=[tf.TensorSpec([None, 4], dtype, name=input_name)])
        def serve(self, x):
            return {"score": tf.reduce_sum(tf.cast(x, tf.float32), axis=1) * self.w}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    if asset_mb:
        with open(os.path.join(path, "assets", "blob.bin"), "wb") as f:
            f.write(np.random.default_rng(0).bytes(asset_mb << 20))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "a": _save_model(str(root / "a")),
        "b": _save_model(str(root / "b"), scale=3.0),
        "renamed": _save_model(str(root / "renamed"), input_name="features"),
        "int": _save_model(str(root / "int"), dtype=tf.int64),
        "big": _save_model(str(root / "big"), asset_mb=16),
    }


def _md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def _complete(version_dir: str, source: str) -> bool:
    """Every file of the source is there with the same bytes."""
    for root, _, files in os.walk(source):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), source)
            target = os.path.join(version_dir, rel)
            if not os.path.exists(target) or os.path.getsize(target) != os.path.getsize(
                    os.path.join(source, rel)):
                return False
    return os.path.exists(os.path.join(version_dir, serving.WARMUP_DIR, serving.WARMUP_FILE))


def test_push_writes_version_warmup_and_configs(models, tmp_path):
    base = str(tmp_path / "serving")
    result = serving.push(models["a"], base, "ctr", warmup_records=5)
    assert result.pushed and result.version == 1
    version_dir = os.path.join(base, "ctr", "1")
    assert _complete(version_dir, models["a"])
    warmup = os.path.join(version_dir, serving.WARMUP_DIR, serving.WARMUP_FILE)
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy())
            for r in tf.data.TFRecordDataset(warmup)]
    assert len(logs) == 5 and logs[0].predict_log.request.model_spec.name == "ctr"
    assert set(logs[0].predict_log.request.inputs) == {"x"}
    assert result.details["warmup"]["requests"] == 5  # replayed through the loaded model
    config = text_format.Parse(open(os.path.join(base, serving.MODELS_CONFIG)).read(),
                               model_server_config_pb2.ModelServerConfig())
    entry = config.model_config_list.config[0]
    assert entry.name == "ctr" and entry.model_platform == "tensorflow"
    assert dict(entry.version_labels) == {"stable": 1}
    assert list(entry.model_version_policy.specific.versions) == [1]
    text_format.Parse(open(os.path.join(base, serving.BATCHING_FILE)).read(),
                      serving.batching_message()())
    assert "prometheus_config" in open(os.path.join(base, serving.MONITORING_FILE)).read()
    manifest = open(os.path.join(base, serving.K8S_MANIFEST)).read()
    assert "tensorflow/serving:2.16.1" in manifest and "--enable_batching" in manifest
    loaded = tf.saved_model.load(version_dir)
    out = loaded.signatures["serving_default"](x=tf.ones([2, 4]))
    np.testing.assert_allclose(out["score"].numpy(), [8.0, 8.0])


def test_push_contract_change_refused_naming_input(models, tmp_path):
    base = str(tmp_path / "serving")
    assert serving.push(models["a"], base, "ctr").pushed
    renamed = serving.push(models["renamed"], base, "ctr")
    assert not renamed.pushed and "input 'x' (float32) was removed or renamed" in renamed.reason
    retyped = serving.push(models["int"], base, "ctr")
    assert not retyped.pushed and "input 'x' changed dtype float32 -> int64" in retyped.reason
    assert serving.versions(os.path.join(base, "ctr")) == [1]
    allowed = serving.push(models["renamed"], base, "ctr", allow_contract_change=True)
    assert allowed.pushed and allowed.version == 2


def test_push_gpu_model_to_cpu_target_refused(models, tmp_path):
    result = serving.push(models["a"], str(tmp_path / "s"), "ctr", target="cpu",
                          requires_gpu=True)
    assert not result.pushed and "TRTEngineOp" in result.reason
    assert not os.path.exists(tmp_path / "s" / "ctr" / "1")


def test_push_unblessed_gate_pushes_nothing(models, tmp_path):
    result = serving.push(models["a"], str(tmp_path / "s"), "ctr",
                          blessings={"SchemaGuard": 0, "Evaluator (ModelBlessing)": 1})
    assert not result.pushed and result.reason == "not blessed by SchemaGuard; nothing pushed"
    assert not os.path.exists(tmp_path / "s" / "ctr")


def test_labels_canary_rollback_and_retention(models, warmup, tmp_path):
    # Labels and retention are the publishing half's; the checks before it are
    # tested above, so versions are published without a fresh-process load each.
    base = str(tmp_path / "serving")
    root = os.path.join(base, "ctr")

    def publish(name, **kwargs):
        return serving.publish_version(models[name], base, "ctr", warmup, **kwargs).version

    assert publish("a") == 1
    assert publish("b", label="canary") == 2
    assert serving.State.load(root).labels == {"stable": 1, "canary": 2}
    assert publish("b", label="stable", keep_versions=2) == 3
    assert publish("a", label="canary", keep_versions=2) == 4
    # Newest two (3, 4) kept; 2 is gone unless labeled: canary moved to 4, stable is 3.
    assert serving.versions(root) == [3, 4]
    labels = serving.rollback(base, "ctr", 3)
    assert labels["stable"] == 3
    config = text_format.Parse(open(os.path.join(base, serving.MODELS_CONFIG)).read(),
                               model_server_config_pb2.ModelServerConfig())
    assert dict(config.model_config_list.config[0].version_labels) == {"stable": 3,
                                                                       "canary": 4}
    with pytest.raises(PusherConfigError, match=r"has no version 2 under"):
        serving.rollback(base, "ctr", 2)


def test_retention_never_removes_labeled(models, warmup, tmp_path):
    base = str(tmp_path / "serving")
    root = os.path.join(base, "ctr")
    serving.publish_version(models["a"], base, "ctr", warmup)          # 1 stable
    for name in ("b", "a"):                                            # 2, then 3 canary
        serving.publish_version(models[name], base, "ctr", warmup, label="canary",
                                keep_versions=1)
    assert serving.versions(root) == [1, 3]


_PUBLISH = ("import sys\n"
            "from tfx_bridge.components.serving_pusher import serving\n"
            "print(serving.publish(sys.argv[1], sys.argv[2], 'ctr', sys.argv[3], 'canary'))\n")


@pytest.fixture(scope="module")
def warmup(models, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("warmup") / "tf_serving_warmup_requests")
    sig = serving.inspect_model(models["a"])["signatures"]["serving_default"]
    serving.write_warmup(path, "ctr", sig, serving.synthesize_feeds(sig, 3))
    return path


@pytest.mark.slow
def test_publish_sigkilled_at_random_moments_leaves_only_complete_versions(models, warmup,
                                                                           tmp_path):
    base = str(tmp_path / "serving")
    root = os.path.join(base, "ctr")
    cmd = [sys.executable, "-c", _PUBLISH, models["big"], base, warmup]
    start = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)  # version 1, and the push's length
    duration = time.monotonic() - start
    rng = random.Random(1234)
    seen = {1: _md5(os.path.join(root, "1", "saved_model.pb"))}
    kills = 0
    for _ in range(30):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.05, 1.0) * duration)  # anywhere from start-up to rename
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        for v in serving.versions(root):
            version_dir = os.path.join(root, str(v))
            assert _complete(version_dir, models["big"]), f"version {v} incomplete"
            digest = _md5(os.path.join(version_dir, "saved_model.pb"))
            assert seen.setdefault(v, digest) == digest, f"version {v} changed"
        if kills >= 12:
            break
    assert kills >= 10, f"only {kills} pushes were killed mid-way"
    final = subprocess.run(cmd, capture_output=True, text=True, check=True)
    new = int(final.stdout.strip())
    assert new > max(seen) and serving.versions(root)[-1] == new
    # Dead pushers leave only non-integer staging folders, which the next push cleans.
    with serving.push_lock(root):
        serving.clean_stale_staging(root)
    assert not [d for d in os.listdir(root) if d.startswith(serving.STAGING_PREFIX)]
    for v in serving.versions(root):
        tf.saved_model.load(os.path.join(root, str(v)))


def test_concurrent_publishes_get_distinct_complete_versions(models, warmup, tmp_path):
    base = str(tmp_path / "serving")
    procs = [subprocess.Popen([sys.executable, "-c", _PUBLISH, models["a"], base, warmup],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    got = sorted(int(p.communicate(timeout=300)[0].strip()) for p in procs)
    assert got == [1, 2, 3]
    for v in got:
        assert _complete(os.path.join(base, "ctr", str(v)), models["a"])


def test_versions_monotonic_after_versions_removed(models, warmup, tmp_path):
    """A counter, not the clock or a folder listing: a removed top version is not reused."""
    base = str(tmp_path / "serving")
    root = os.path.join(base, "ctr")
    assert serving.publish(models["a"], base, "ctr", warmup) == 1
    # Unlabeled, so removing it leaves a consistent state (a labeled version's removal
    # is refused as inconsistent state).
    assert serving.publish(models["a"], base, "ctr", warmup, label=None) == 2
    import shutil
    shutil.rmtree(os.path.join(root, "2"))
    assert serving.publish(models["a"], base, "ctr", warmup) == 3


def test_contract_changes_lists_every_break():
    old = {"inputs": {"a": {"dtype": "int64", "shape": [None]},
                      "b": {"dtype": "float32", "shape": [None, 3]}},
           "outputs": {"score": {"dtype": "float32", "shape": [None]}}}
    new = {"inputs": {"a": {"dtype": "int32", "shape": [None]},
                      "b": {"dtype": "float32", "shape": [None, 4]}},
           "outputs": {"prob": {"dtype": "float32", "shape": [None]}}}
    problems = serving.contract_changes(old, new)
    assert len(problems) == 3
    assert any("changed dtype int64 -> int32" in p for p in problems)
    assert any("changed shape [None, 3] -> [None, 4]" in p for p in problems)
    assert any("output 'score' was removed" in p for p in problems)


def test_batching_unknown_field_refused():
    with pytest.raises(PusherConfigError, match=r"Unknown batching fields \['max_batch'\]"):
        serving.batching_text("cpu", {"max_batch": 3})


def test_inspect_unloadable_model_refused(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "saved_model.pb").write_bytes(b"not a proto")
    with pytest.raises(PushRefused, match=r"does not load in a fresh process"):
        serving.inspect_model(str(tmp_path / "bad"))


def test_push_identical_model_adds_no_version(models, tmp_path):
    base = str(tmp_path / "serving")
    first = serving.push(models["a"], base, "ctr")
    again = serving.push(models["a"], base, "ctr")
    assert again.pushed and again.version == first.version == 1
    assert "no new version" in again.reason
    assert serving.versions(os.path.join(base, "ctr")) == [1]
    assert serving.push(models["b"], base, "ctr").version == 2  # a changed model does


def test_push_identical_model_repairs_configs_of_interrupted_push(models, tmp_path):
    # A push killed after publishing but before the configs were written left the
    # model out of models.config; re-pushing the same model must put it back.
    base = tmp_path / "serving"
    serving.push(models["a"], str(base), "ctr")
    config = (base / serving.MODELS_CONFIG).read_text()
    (base / serving.MODELS_CONFIG).write_text("model_config_list {\n}\n")
    again = serving.push(models["a"], str(base), "ctr")
    assert again.version == 1 and "no new version" in again.reason
    assert (base / serving.MODELS_CONFIG).read_text() == config


def _with_tflite(source: str, folder: str, tflite_from: str) -> str:
    """``source`` copied, plus ``model.tflite`` converted from ``tflite_from``."""
    import shutil

    shutil.copytree(source, folder)
    converter = tf.lite.TFLiteConverter.from_saved_model(tflite_from,
                                                         signature_keys=["serving_default"])
    with open(os.path.join(folder, serving.TFLITE_FILE), "wb") as f:
        f.write(converter.convert())
    return folder


def test_push_tflite_model_warmed_through_tflite_and_flag_in_manifest(models, tmp_path):
    model = _with_tflite(models["a"], str(tmp_path / "lite"), models["a"])
    base = str(tmp_path / "serving")
    result = serving.push(model, base, "ctr", warmup_records=4,
                          serving_flags=[serving.TFLITE_FLAG])
    assert result.pushed, result.reason
    assert result.details["warmup"]["tflite"]["requests"] == 4  # replayed through model.tflite
    assert os.path.exists(os.path.join(base, "ctr", "1", serving.TFLITE_FILE))
    assert f"- {serving.TFLITE_FLAG}" in open(os.path.join(base, serving.K8S_MANIFEST)).read()
    # A later push that needs no flag, and a rollback, keep the flag: version 1 needs it.
    assert serving.push(models["b"], base, "ctr").pushed
    serving.rollback(base, "ctr", 1)
    assert serving.server_flags(base) == [serving.TFLITE_FLAG]
    assert f"- {serving.TFLITE_FLAG}" in open(os.path.join(base, serving.K8S_MANIFEST)).read()


def test_push_tflite_not_matching_savedmodel_refused(models, tmp_path):
    # model.tflite converted from a model whose input is named "features", not "x".
    model = _with_tflite(models["a"], str(tmp_path / "lite"), models["renamed"])
    result = serving.push(model, str(tmp_path / "serving"), "ctr")
    assert not result.pushed
    assert "model.tflite does not match the SavedModel's serving_default" in result.reason
    assert "'features'" in result.reason


def test_push_unknown_serving_flag_refused(models, tmp_path):
    with pytest.raises(PusherConfigError, match=r"flags \['--enable_magic'\].*known"):
        serving.push(models["a"], str(tmp_path / "serving"), "ctr",
                     serving_flags=["--enable_magic"])


def test_models_config_base_paths_agree_with_manifest_mount(models, tmp_path):
    import yaml

    base = str(tmp_path / "serving")
    assert serving.push(models["a"], base, "ctr").pushed
    assert serving.push(models["int"], base, "ids").pushed
    config = text_format.Parse(open(os.path.join(base, serving.MODELS_CONFIG)).read(),
                               model_server_config_pb2.ModelServerConfig())
    deployment, service = yaml.safe_load_all(open(os.path.join(base, serving.K8S_MANIFEST)))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    mount = container["volumeMounts"][0]["mountPath"]
    volume = deployment["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"]
    assert volume == os.path.abspath(base) and service["kind"] == "Service"
    # What the server reads, where the manifest mounts it.
    assert {c.name: c.base_path for c in config.model_config_list.config} == {
        "ctr": f"{mount}/ctr", "ids": f"{mount}/ids"}
    assert f"--model_config_file={mount}/{serving.MODELS_CONFIG}" in container["args"]
    for c in config.model_config_list.config:  # and each one is there on the host
        assert serving.versions(os.path.join(volume, os.path.relpath(c.base_path, mount)))


def test_push_while_another_holds_the_lock_exit_4_busy(models, tmp_path):
    base = tmp_path / "serving"
    (base / "ctr").mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"f = open({str(base / 'ctr' / serving.LOCK_FILE)!r}, 'a')\n"
         "fcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
        proc = subprocess.run([exe, "push", "--model", models["a"], "--base-path", str(base),
                               "--model-name", "ctr", "--lock-timeout", "1", "--json"],
                              capture_output=True, text=True, timeout=300)
    finally:
        holder.kill()
    assert proc.returncode == 4, proc.stderr
    assert "busy, retry later" in proc.stderr and "Traceback" not in proc.stderr
    assert '"error_type": "PushLocked"' in proc.stdout.strip().splitlines()[-1]
    assert serving.versions(str(base / "ctr")) == []


@pytest.mark.parametrize("name", ["../evil", "a/b", "", "ok name", "/abs", ".hidden",
                                  "-flag", "x" * 129, "7"])
def test_push_model_name_not_a_safe_folder_refused_nothing_written(models, tmp_path, name):
    base = tmp_path / "serving"
    # "7" is a safe folder but a version number to TF Serving: the pusher's own refusal.
    with pytest.raises(PusherConfigError if name == "7" else UnsafeNameError,
                       match=r"Model name .* (cannot be used as a folder name|is a number)"):
        serving.push(models["a"], str(base), name)
    assert os.listdir(tmp_path) == []  # no folder made, inside or outside the base


def test_push_symlink_leading_out_of_the_model_refused(models, tmp_path):
    import shutil

    model = str(tmp_path / "m")
    shutil.copytree(models["a"], model)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    os.symlink(secret, os.path.join(model, "assets", "leak.txt"))
    result = serving.push(model, str(tmp_path / "serving"), "ctr")
    assert not result.pushed
    assert f"assets/leak.txt -> {secret} (outside the folder)" in result.reason
    assert serving.versions(str(tmp_path / "serving" / "ctr")) == []


def test_push_in_folder_symlinked_variables_copied_and_loadable(models, tmp_path):
    import shutil

    model = str(tmp_path / "m")
    shutil.copytree(models["a"], model)
    os.rename(os.path.join(model, "variables"), os.path.join(model, "real_variables"))
    os.symlink("real_variables", os.path.join(model, "variables"))
    result = serving.push(model, str(tmp_path / "serving"), "ctr")
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
    assert serving.push(models["a"], str(base), "ctr").pushed
    (base / "ctr" / serving.STATE_FILE).write_text(state_text)
    config = (base / serving.MODELS_CONFIG).read_text()
    with pytest.raises(PusherConfigError, match=needle + r".*Repair or remove"):
        serving.push(models["b"], str(base), "ctr")
    # Another model's push is stopped too, before anything of it is written.
    with pytest.raises(PusherConfigError, match=needle):
        serving.push(models["b"], str(base), "other")
    assert not (base / "other").exists() and serving.versions(str(base / "ctr")) == [1]
    assert (base / serving.MODELS_CONFIG).read_text() == config


@pytest.mark.parametrize("kwargs,needle", [
    ({"keep_versions": 0}, r"keep_versions must be >= 1"),
    ({"examples_dir": "/no/such/examples"}, r"Examples folder /no/such/examples does not exist"),
    ({"batching_overrides": {"max_batch": 3}}, r"Unknown batching fields"),
])
def test_push_bad_argument_refused_before_publishing(models, tmp_path, kwargs, needle):
    base = tmp_path / "serving"
    assert serving.push(models["a"], str(base), "ctr").pushed
    with pytest.raises(PusherConfigError, match=needle):
        serving.push(models["b"], str(base), "ctr", **kwargs)
    assert serving.versions(str(base / "ctr")) == [1]


def test_push_base_path_that_is_a_file_refused(models, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PusherConfigError, match=r"Base path .* is a file"):
        serving.push(models["a"], str(tmp_path / "file"), "ctr")


def test_rollback_keeps_the_gpu_deployment_and_batching(models, tmp_path):
    import yaml

    base = str(tmp_path / "serving")
    overrides = {"max_batch_size": 64}
    assert serving.push(models["a"], base, "ctr", target="gpu",
                        batching_overrides=overrides).pushed
    assert serving.push(models["b"], base, "ctr", target="gpu",
                        batching_overrides=overrides).pushed
    batching = open(os.path.join(base, serving.BATCHING_FILE)).read()
    serving.rollback(base, "ctr", 1)
    deployment = next(yaml.safe_load_all(open(os.path.join(base, serving.K8S_MANIFEST))))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == serving.SERVING_IMAGE["gpu"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert open(os.path.join(base, serving.BATCHING_FILE)).read() == batching
    assert "value: 64" in batching


def test_rollback_mistyped_model_name_writes_nothing(models, tmp_path):
    base = tmp_path / "serving"
    assert serving.push(models["a"], str(base), "ctr").pushed
    before = sorted(str(p) for p in base.rglob("*"))
    with pytest.raises(PusherConfigError, match=r"No pushed model 'crt' under .*Nothing was"):
        serving.rollback(str(base), "crt", 1)
    assert sorted(str(p) for p in base.rglob("*")) == before
