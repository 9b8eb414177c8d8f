"""ServingPusher's core: complete versions, atomic under SIGKILL and concurrent pushes,
labels, rollback and retention, the push lock.

What a push checks and the configs it writes are in test_serving_checks.py; bad names,
paths, state and arguments in test_serving_refusals.py; the models in conftest.py.
"""
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

from tfx_bridge.components.serving_pusher import (
    base_layout,
    checks,
    publish,
    server_config,
    serving,
    state,
)
from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.errors import PusherConfigError
from tfx_bridge.components.serving_pusher.warmup import synthesize_feeds, write_warmup


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
    return os.path.exists(
        os.path.join(version_dir, base_layout.WARMUP_DIR, base_layout.WARMUP_FILE))



def test_synthesize_feeds_open_sizes_from_representative_inputs_fixed_kept():
    signature = {"inputs": {"images": {"dtype": "uint8", "shape": [None, None, None, 3]},
                            "mask": {"dtype": "float32", "shape": [None, 5]}}}
    feeds = synthesize_feeds(signature, 2, representative=(
        "images:uint8:-1,480,640,3", "mask:float32:-1,7"))
    assert len(feeds) == 2
    assert feeds[0]["images"].shape == (1, 480, 640, 3)
    # A representative size that contradicts a fixed dimension is not applied.
    assert feeds[0]["mask"].shape == (1, 5)


def test_push_writes_version_warmup_and_configs(models, tmp_path):
    base = str(tmp_path / "serving")
    result = serving.push(models["a"], PusherConfig(base, "ctr", warmup_records=5))
    assert result.pushed and result.version == 1
    version_dir = os.path.join(base, "ctr", "1")
    assert _complete(version_dir, models["a"])
    warmup = os.path.join(version_dir, base_layout.WARMUP_DIR, base_layout.WARMUP_FILE)
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy())
            for r in tf.data.TFRecordDataset(warmup)]
    assert len(logs) == 5 and logs[0].predict_log.request.model_spec.name == "ctr"
    assert set(logs[0].predict_log.request.inputs) == {"x"}
    assert result.details["warmup"]["requests"] == 5  # replayed through the loaded model
    config = text_format.Parse(open(os.path.join(base, base_layout.MODELS_CONFIG)).read(),
                               model_server_config_pb2.ModelServerConfig())
    entry = config.model_config_list.config[0]
    assert entry.name == "ctr" and entry.model_platform == "tensorflow"
    assert dict(entry.version_labels) == {"stable": 1}
    assert list(entry.model_version_policy.specific.versions) == [1]
    text_format.Parse(open(os.path.join(base, base_layout.BATCHING_FILE)).read(),
                      server_config.batching_message()())
    assert "prometheus_config" in open(os.path.join(base, base_layout.MONITORING_FILE)).read()
    manifest = open(os.path.join(base, base_layout.K8S_MANIFEST)).read()
    assert "tensorflow/serving:2.16.1" in manifest and "--enable_batching" in manifest
    loaded = tf.saved_model.load(version_dir)
    out = loaded.signatures["serving_default"](x=tf.ones([2, 4]))
    np.testing.assert_allclose(out["score"].numpy(), [8.0, 8.0])


def test_labels_canary_rollback_and_retention(models, warmup, tmp_path):
    # Labels and retention are the publishing half's; the checks before it are
    # tested in test_serving_checks.py, so versions are published without a fresh-process
    # load each.
    base = str(tmp_path / "serving")
    root = os.path.join(base, "ctr")

    def publish(name, **kwargs):
        return serving.publish_version(models[name], base, "ctr", warmup, **kwargs).version

    assert publish("a") == 1
    assert publish("b", label="canary") == 2
    assert state.State.load(root).labels == {"stable": 1, "canary": 2}
    assert publish("b", label="stable", keep_versions=2) == 3
    assert publish("a", label="canary", keep_versions=2) == 4
    # Newest two (3, 4) kept; 2 is gone unless labeled: canary moved to 4, stable is 3.
    assert state.versions(root) == [3, 4]
    labels = serving.rollback(base, "ctr", 3)
    assert labels["stable"] == 3
    config = text_format.Parse(open(os.path.join(base, base_layout.MODELS_CONFIG)).read(),
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
    assert state.versions(root) == [1, 3]


_PUBLISH = ("import sys\n"
            "from tfx_bridge.components.serving_pusher.publish import LocalDiskPublisher\n"
            "print(LocalDiskPublisher().publish(sys.argv[1], sys.argv[2], 'ctr', sys.argv[3],"
            " 'canary'))\n")


@pytest.fixture(scope="module")
def warmup(models, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("warmup") / "tf_serving_warmup_requests")
    sig = checks.inspect_model(models["a"])["signatures"]["serving_default"]
    write_warmup(path, "ctr", sig, synthesize_feeds(sig, 3))
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
        for v in state.versions(root):
            version_dir = os.path.join(root, str(v))
            assert _complete(version_dir, models["big"]), f"version {v} incomplete"
            digest = _md5(os.path.join(version_dir, "saved_model.pb"))
            assert seen.setdefault(v, digest) == digest, f"version {v} changed"
        if kills >= 12:
            break
    assert kills >= 10, f"only {kills} pushes were killed mid-way"
    final = subprocess.run(cmd, capture_output=True, text=True, check=True)
    new = int(final.stdout.strip())
    assert new > max(seen) and state.versions(root)[-1] == new
    # Dead pushers leave only non-integer staging folders, which the next push cleans.
    with publish.push_lock(root):
        publish.clean_stale_staging(root)
    assert not [d for d in os.listdir(root) if d.startswith(base_layout.STAGING_PREFIX)]
    for v in state.versions(root):
        tf.saved_model.load(os.path.join(root, str(v)))


def test_concurrent_publishes_get_distinct_complete_versions(models, warmup, tmp_path):
    base = str(tmp_path / "serving")
    procs = [subprocess.Popen([sys.executable, "-c", _PUBLISH, models["a"], base, warmup],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    got = sorted(int(p.communicate(timeout=300)[0].strip()) for p in procs)
    assert got == [1, 2, 3]
    for v in got:
        assert _complete(os.path.join(base, "ctr", str(v)), models["a"])


_PUBLISH_SAME = (
    "import sys\n"
    "from tfx_bridge.components.serving_pusher import publish\n"
    "try:\n"
    "    print(publish.LocalDiskPublisher().publish(sys.argv[1], sys.argv[2], 'ctr', sys.argv[3],"
    " digest='sha:x'))\n"
    "except publish.AlreadyPublished as e:\n"
    "    print(f'same {e.version}')\n")


def test_concurrent_publishes_of_one_model_make_one_version(models, warmup, tmp_path):
    """Each push checked "identical?" before the lock; the check repeated under it
    keeps the same model (one digest) from two versions."""
    base = str(tmp_path / "serving")
    procs = [subprocess.Popen([sys.executable, "-c", _PUBLISH_SAME, models["a"], base, warmup],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    got = sorted(p.communicate(timeout=300)[0].strip() for p in procs)
    assert got == ["1", "same 1", "same 1"]
    assert state.versions(os.path.join(base, "ctr")) == [1]
    assert not [d for d in os.listdir(os.path.join(base, "ctr"))
                if d.startswith(base_layout.STAGING_PREFIX)]


def test_clean_stale_staging_spares_live_pushes_and_removes_dead_ones(tmp_path):
    """A push copies into its staging folder outside the lock; another push cleaning
    under the lock must not delete it mid-copy."""
    import socket

    from tfx_bridge.components.serving_pusher import publish

    root = tmp_path / "ctr"
    host, hexid = socket.gethostname(), "0" * 32
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    names = {"live": f"{base_layout.STAGING_PREFIX}p{os.getpid()}@{host}-{hexid}",
             "dead": f"{base_layout.STAGING_PREFIX}p{dead}@{host}-{hexid}",
             "other_host": f"{base_layout.STAGING_PREFIX}p1@another-host.example-{hexid}",
             "old_style": f"{base_layout.STAGING_PREFIX}{hexid}"}
    for name in names.values():
        (root / name).mkdir(parents=True)
    with publish.push_lock(str(root)):
        removed = publish.clean_stale_staging(str(root))
    assert sorted(removed) == sorted([names["dead"], names["old_style"]])
    assert sorted(os.listdir(root)) == sorted([names["live"], names["other_host"],
                                               base_layout.LOCK_FILE])


def test_versions_monotonic_after_versions_removed(models, warmup, tmp_path):
    """A counter, not the clock or a folder listing: a removed top version is not reused."""
    base = str(tmp_path / "serving")
    root = os.path.join(base, "ctr")
    assert publish.LocalDiskPublisher().publish(models["a"], base, "ctr", warmup) == 1
    # Unlabeled, so removing it leaves a consistent state (a labeled version's removal
    # is refused as inconsistent state).
    assert publish.LocalDiskPublisher().publish(models["a"], base, "ctr", warmup, label=None) == 2
    import shutil
    shutil.rmtree(os.path.join(root, "2"))
    assert publish.LocalDiskPublisher().publish(models["a"], base, "ctr", warmup) == 3


def test_push_while_another_holds_the_lock_exit_4_busy(models, tmp_path):
    base = tmp_path / "serving"
    (base / "ctr").mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"f = open({str(base / 'ctr' / base_layout.LOCK_FILE)!r}, 'a')\n"
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
    assert state.versions(str(base / "ctr")) == []


def test_push_configs_readable_by_the_server_user_with_the_umask_mode(models):
    """TF Serving often runs as another user than the pusher: every file the push
    writes gets the mode new files get (0666 under the umask), as the version's do."""
    import shutil
    import stat
    import tempfile

    old = os.umask(0o022)
    top = tempfile.mkdtemp(prefix="tfx-bridge-modes-")
    try:
        os.chmod(top, 0o755)
        base = os.path.join(top, "serving")
        assert serving.push(models["a"], PusherConfig(base, "ctr")).pushed
        written = [os.path.join(base, name) for name in (
            base_layout.MODELS_CONFIG, base_layout.BATCHING_FILE, base_layout.MONITORING_FILE,
            base_layout.K8S_MANIFEST)] + [os.path.join(base, "ctr", base_layout.STATE_FILE)]
        for path in written:
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o644, path
        if os.geteuid() == 0:  # read them as another user (nobody), as the server would
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    for path in written:
                        with open(path, "rb") as f:
                            f.read()
                    code = 0
                finally:
                    os._exit(code)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    finally:
        os.umask(old)
        shutil.rmtree(top, ignore_errors=True)
