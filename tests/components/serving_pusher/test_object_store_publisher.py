"""ServingPusher with an s3:// base path, against an S3-compatible server on 127.0.0.1:
push, rollback, configs, pushes killed part-way and concurrent pushes."""
from __future__ import annotations

import os
import random
import threading

import pytest
import tensorflow as tf
import yaml
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from tfx_bridge.components.serving_pusher import (
    base_layout,
    checks,
    object_store_publisher,
    serving,
    state,
)
from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.warmup import synthesize_feeds, write_warmup
from tfx_bridge.storage import fs, s3

pytestmark = pytest.mark.s3


@pytest.fixture(scope="module")
def models(tmp_path_factory, scaled_saved_model):
    root = tmp_path_factory.mktemp("models")
    return {"a": scaled_saved_model(str(root / "a"), 2.0),
            "b": scaled_saved_model(str(root / "b"), 3.0)}


@pytest.fixture(scope="module")
def warmup(models, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("warmup") / base_layout.WARMUP_FILE)
    sig = checks.serving_signature(models["a"])
    write_warmup(path, "ctr", sig, synthesize_feeds(sig, 2))
    return path


def _config(base: str) -> model_server_config_pb2.ModelServerConfig:
    return text_format.Parse(fs.read_text(fs.join(base, base_layout.MODELS_CONFIG)),
                             model_server_config_pb2.ModelServerConfig())


def _complete(version_dir: str, source: str) -> bool:
    """Every file of the source, byte for byte, and the warmup requests."""
    files = set(fs.files_under(version_dir))
    for rel in fs.files_under(source):
        if rel not in files or fs.read_bytes(fs.join(version_dir, rel)) != fs.read_bytes(
                os.path.join(source, rel)):
            return False
    return f"{base_layout.WARMUP_DIR}/{base_layout.WARMUP_FILE}" in files


def _score(version_dir: str) -> float:
    with fs.local_copy(version_dir) as local:
        loaded = tf.saved_model.load(local)
        return float(loaded.signatures["serving_default"](x=tf.ones([1, 4]))["score"][0])


def test_push_and_rollback_on_s3_base_path_keep_labels_configs_and_versions(models, s3_bucket):
    base = fs.join(s3_bucket, "serving")
    first = serving.push(models["a"], PusherConfig(base, "ctr"))
    assert first.version == 1 and first.destination == fs.join(base, "ctr", "1"), first.reason
    # The second only publishes (its checks are the first's; they are not what is tested).
    warmup = fs.join(base, "ctr", "1", base_layout.WARMUP_DIR, base_layout.WARMUP_FILE)
    with fs.local_copy(warmup) as local_warmup:
        assert serving.publish_version(models["b"], base, "ctr", local_warmup).version == 2
    entry = _config(base).model_config_list.config[0]
    assert (entry.name, entry.base_path) == ("ctr", "/models/ctr")
    assert dict(entry.version_labels) == {"stable": 2}
    assert list(entry.model_version_policy.specific.versions) == [2]

    assert serving.rollback(base, "ctr", 1) == {"stable": 1}
    entry = _config(base).model_config_list.config[0]
    assert dict(entry.version_labels) == {"stable": 1}
    assert list(entry.model_version_policy.specific.versions) == [1, 2]
    assert state.State.load(fs.join(base, "ctr")).labels == {"stable": 1}
    assert _complete(fs.join(base, "ctr", "1"), models["a"])
    assert (_score(fs.join(base, "ctr", "1")), _score(fs.join(base, "ctr", "2"))) == (8.0, 12.0)
    # Staging lives outside the model folder and is gone once the push is done.
    assert sorted(fs.listdir(base)) == sorted(
        ["ctr", base_layout.MODELS_CONFIG, base_layout.BATCHING_FILE, base_layout.MONITORING_FILE,
         base_layout.K8S_MANIFEST])
    # The manifest mounts the bucket prefix (stock TF Serving cannot read s3:// itself).
    docs = list(yaml.safe_load_all(fs.read_text(fs.join(base, base_layout.K8S_MANIFEST))))
    volume = next(d for d in docs if d["kind"] == "PersistentVolume")
    assert volume["spec"]["csi"]["volumeAttributes"]["bucketName"] == s3_bucket[len("s3://"):]
    assert "prefix serving/" in volume["spec"]["mountOptions"]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]


def test_cli_push_then_rollback_on_s3_from_aws_variables(models, s3_bucket, s3_server,
                                                         cli_in_child, capsys):
    from tfx_bridge import cli

    base = fs.join(s3_bucket, "serving")
    env = {k: v for k, v in os.environ.items() if not k.startswith("S3_")}
    env.update(s3_server)  # only the standard AWS variables
    proc = cli_in_child("push", "--model", models["a"], "--base-path", base,
                        "--model-name", "ctr", "--quiet", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Pushed: pushed as version 1 (stable)" in proc.stdout
    assert cli.main(["rollback", "--base-path", base, "--model-name", "ctr", "--to", "3"]) == 2
    assert "has no version 3" in capsys.readouterr().err
    assert cli.main(["rollback", "--base-path", base, "--model-name", "ctr", "--to", "1"]) == 0
    assert state.State.load(fs.join(base, "ctr")).labels == {"stable": 1}


class _Killed(Exception):
    """Raised by every S3 request after the chosen one: the store then holds exactly
    what a push killed at that moment leaves (nothing it does afterwards lands)."""


def _kill_after(requests: int):
    """Makes this thread's S3 client fail every request after the first ``requests``;
    returns (the counter, a function that disarms it)."""
    client = s3._client()
    seen = [0]

    def before_send(**_):
        seen[0] += 1
        if seen[0] > requests:
            raise _Killed(f"killed after {requests} requests")

    client.meta.events.register("before-send.s3", before_send)
    return seen, lambda: client.meta.events.unregister("before-send.s3", before_send)


def _publish(models, base, warmup, name="ctr", model="a"):
    return serving.publish_version(models[model], base, name, warmup,
                                   keep_versions=2).version


def _check_served_versions_complete(base, models, model="a"):
    root = fs.join(base, "ctr")
    for v in state.versions(root):
        assert _complete(fs.join(root, str(v)), models[model]), f"version {v} incomplete"
    state.State.load(root)  # consistent: labels name existing versions
    if fs.exists(fs.join(base, base_layout.MODELS_CONFIG)):
        for entry in _config(base).model_config_list.config:
            named = set(entry.model_version_policy.specific.versions)
            assert named <= set(state.versions(root)), (named, state.versions(root))


@pytest.mark.slow
def test_publish_killed_at_random_requests_on_s3_leaves_only_complete_versions(
        models, warmup, s3_bucket):
    base = fs.join(s3_bucket, "serving")
    assert _publish(models, base, warmup) == 1
    seen, disarm = _kill_after(10 ** 9)
    assert _publish(models, base, warmup) == 2
    disarm()
    total = seen[0]  # requests of one whole push: upload, number, copy, state, configs
    assert total > 30, total
    rng = random.Random(7)
    kills = 0
    for point in sorted(rng.sample(range(total), 12)):
        _, disarm = _kill_after(point)
        try:
            _publish(models, base, warmup)
        except _Killed:
            kills += 1
        finally:
            disarm()
        _check_served_versions_complete(base, models)
    assert kills >= 10, f"only {kills} of 12 pushes were killed part-way"
    taken = fs.listdir(fs.join(base, "ctr", object_store_publisher.MARKERS))
    new = _publish(models, base, warmup)
    assert new > max(int(n) for n in taken), "a version number was reused"
    assert state.versions(fs.join(base, "ctr"))[-1] == new
    assert new in _config(base).model_config_list.config[0].model_version_policy.specific.versions
    _check_served_versions_complete(base, models)
    # What dead pushes left (staging uploads, unfinished version folders) goes once stale.
    later = object_store_publisher.time.time() + object_store_publisher.STALE_AFTER_S + 1
    object_store_publisher.clean_stale(base, "ctr", now=later)
    assert object_store_publisher.STAGING_ROOT not in fs.listdir(base)
    root = fs.join(base, "ctr")
    assert sorted(int(n) for n in fs.listdir(root) if n.isdigit()) == state.versions(root)


def test_concurrent_pushes_on_s3_take_distinct_versions_and_one_config(
        models, warmup, s3_bucket):
    base = fs.join(s3_bucket, "serving")
    jobs = [("ctr", "a")] * 3 + [("rank", "b")] * 3
    barrier = threading.Barrier(len(jobs))
    got, errors = {}, []

    def push(i, name, model):
        try:
            barrier.wait()
            got[i] = (name, serving.publish_version(models[model], base, name, warmup,
                                                    keep_versions=5).version)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=push, args=(i, *job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for name, model in (("ctr", "a"), ("rank", "b")):
        numbers = sorted(v for n, v in got.values() if n == name)
        assert numbers == [1, 2, 3], (name, numbers)
        for v in numbers:
            assert _complete(fs.join(base, name, str(v)), models[model])
    # models.config was rewritten by all six; the last write saw every push.
    entries = {e.name: e for e in _config(base).model_config_list.config}
    assert sorted(entries) == ["ctr", "rank"]
    for entry in entries.values():
        assert 3 in entry.model_version_policy.specific.versions
        assert entry.version_labels["stable"] in (1, 2, 3)
