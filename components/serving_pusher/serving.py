"""ServingPusher's core: validated, atomic pushes to a TF Serving model base path.

No TFX imports. Layout (a contract: docs/ARCHITECTURE.md)::

  <base>/models.config               ModelServerConfig text proto, every model under <base>
  <base>/batching_parameters.txt     BatchingParameters text
  <base>/monitoring.config           MonitoringConfig (Prometheus)
  <base>/serving.k8s.yaml            Deployment + Service for tensorflow/serving
  <base>/<name>/<version>/           complete SavedModel + assets.extra/tf_serving_warmup_requests
                                     (+ model.tflite, served under --prefer_tflite_model=true)
  <base>/<name>/.staging-*/          in-progress pushes (never integer-named: Serving skips them)
  <base>/<name>/.state.json          labels and the highest version ever issued
  <base>/<name>/.push.lock           serializes concurrent pushers

A push copies into a staging folder, fsyncs every file and folder, then
renames it to the next integer version under the lock: a push killed at any
moment leaves no incomplete integer-named version and earlier versions
untouched; versions are monotonic and unique across concurrent pushers and
clock changes (a counter, never the time). Object stores (gs://) have no
atomic rename: there the version folder is written with saved_model.pb last,
the file TF Serving waits for.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import shutil
import time
import uuid
from typing import Dict, List, Optional, Sequence

from tfx_bridge import child
from tfx_bridge.components.serving_pusher.errors import (
    PusherConfigError,
    PushLocked,
    PushRefused,
)
from tfx_bridge.savedmodel import SERVER_FLAGS, SERVING_SIGNATURE, TFLITE_FILE, TFLITE_FLAG

MODELS_CONFIG = "models.config"
BATCHING_FILE = "batching_parameters.txt"
MONITORING_FILE = "monitoring.config"
K8S_MANIFEST = "serving.k8s.yaml"
STATE_FILE = ".state.json"
LOCK_FILE = ".push.lock"
STAGING_PREFIX = ".staging-"
WARMUP_DIR = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"
MAX_WARMUP = 1000
LABELS = ("stable", "canary")
TARGETS = ("cpu", "gpu")
SERVING_IMAGE = {"cpu": "tensorflow/serving:2.16.1", "gpu": "tensorflow/serving:2.16.1-gpu"}
PROMETHEUS_PATH = "/monitoring/prometheus/metrics"
# Where the manifest mounts the base path inside the server container; models.config
# names every model's base_path under it.
SERVER_MOUNT = "/models"

# BatchingParameters defaults (TF Serving's batching guide): small batches and
# a short timeout on CPU, where latency dominates; bigger on GPU.
BATCHING_DEFAULTS = {
    "cpu": {"max_batch_size": 32, "batch_timeout_micros": 1000, "max_enqueued_batches": 100,
            "num_batch_threads": 4, "pad_variable_length_inputs": True},
    "gpu": {"max_batch_size": 128, "batch_timeout_micros": 2000, "max_enqueued_batches": 1000,
            "num_batch_threads": 8, "pad_variable_length_inputs": True},
}
_BATCHING_FIELDS = {"max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
                    "num_batch_threads", "pad_variable_length_inputs", "allowed_batch_sizes",
                    "thread_pool_name"}


def _is_remote(path: str) -> bool:
    return "://" in path


# --------------------------------------------------------------------------- inspect



INSPECT_MODULE = "tfx_bridge.components.serving_pusher.inspect_model"


def inspect_model(saved_model_dir: str, warmup_file: str = "") -> dict:
    """Loads the SavedModel in a fresh process: signatures, and warmup replayed;
    the same for ``model.tflite`` when the folder has one (``"tflite"``)."""
    result = child.run_python(["-m", INSPECT_MODULE, saved_model_dir, warmup_file, TFLITE_FILE],
                              "INSPECT ", timeout=900)
    if result.returncode != 0 or result.payload is None:
        raise PushRefused(f"{saved_model_dir} does not load in a fresh process: "
                          f"{result.stderr_tail}")
    return result.payload


def serving_signature(saved_model_dir: str, name: str = SERVING_SIGNATURE) -> dict:
    """A signature's inputs/outputs read from saved_model.pb (no graph is loaded)."""
    from tfx_bridge.savedmodel import signature_specs

    return signature_specs(saved_model_dir, name, PushRefused)


# --------------------------------------------------------------------------- checks


def contract_changes(old: dict, new: dict) -> List[str]:
    """What breaks clients of ``old`` (serving_default signatures from inspect_model)."""
    problems = []
    oi, ni = old["inputs"], new["inputs"]
    for name, spec in sorted(oi.items()):
        if name not in ni:
            problems.append(f"input {name!r} ({spec['dtype']}) was removed or renamed "
                            f"(new inputs: {sorted(ni)})")
        elif ni[name]["dtype"] != spec["dtype"]:
            problems.append(f"input {name!r} changed dtype {spec['dtype']} -> "
                            f"{ni[name]['dtype']}")
        elif not _shape_compatible(spec["shape"], ni[name]["shape"]):
            problems.append(f"input {name!r} changed shape {spec['shape']} -> "
                            f"{ni[name]['shape']}")
    for name in sorted(set(ni) - set(oi)):
        problems.append(f"input {name!r} is new; clients of the served version do not send it")
    oo, no = old["outputs"], new["outputs"]
    for name, spec in sorted(oo.items()):
        if name not in no:
            problems.append(f"output {name!r} was removed or renamed (new outputs: {sorted(no)})")
        elif no[name]["dtype"] != spec["dtype"]:
            problems.append(f"output {name!r} changed dtype {spec['dtype']} -> "
                            f"{no[name]['dtype']}")
    return problems


def _shape_compatible(old: Optional[list], new: Optional[list]) -> bool:
    if old is None or new is None:
        return True
    if len(old) != len(new):
        return False
    return all(a is None or b is None or a == b for a, b in zip(old, new, strict=True))


def check_tflite(inspected: dict, saved_model_sig: dict) -> None:
    """``model.tflite`` (served under --prefer_tflite_model) must offer serving_default
    with the SavedModel's input and output names and dtypes."""
    if not inspected.get("tflite"):
        return
    lite = inspected["tflite"]["signatures"].get(SERVING_SIGNATURE)
    if lite is None:
        raise PushRefused(f"{TFLITE_FILE} has no serving_default signature (it has "
                          f"{sorted(inspected['tflite']['signatures'])}); a server with "
                          f"{TFLITE_FLAG} would serve it. Rebuild it or remove it.")
    problems = []
    for side in ("inputs", "outputs"):
        want = {k: v["dtype"] for k, v in saved_model_sig[side].items()}
        if lite[side] != want:
            problems.append(f"{side} {lite[side]} vs the SavedModel's {want}")
    if problems:
        raise PushRefused(f"{TFLITE_FILE} does not match the SavedModel's serving_default: "
                          + "; ".join(problems) + ". Rebuild it from this SavedModel.")
    error = (inspected["tflite"].get("warmup") or {}).get("error")
    if error:
        raise PushRefused(f"{TFLITE_FILE} failed the warmup requests: {error}. A server "
                          f"with {TFLITE_FLAG} would fail to load it; rebuild it.")


def check_target(target: str, requires_gpu: bool, serving_flags: Sequence[str]) -> None:
    if target not in TARGETS:
        raise PusherConfigError(f"target {target!r}: use one of {TARGETS}.")
    unknown = sorted(set(serving_flags) - set(SERVER_FLAGS))
    if unknown:
        raise PusherConfigError(
            f"The model needs TF Serving flags {unknown}, which ServingPusher does not know "
            f"how to configure (known: {list(SERVER_FLAGS)}). Serve it with a hand-written "
            "server config.")
    if requires_gpu and target == "cpu":
        raise PushRefused(
            "The model needs a GPU (TensorRT engines); TF Serving's CPU image has no "
            "TRTEngineOp. Push the non-TRT model to CPU servers, or use --target gpu.")


# --------------------------------------------------------------------------- warmup


def write_warmup(path: str, model_name: str, signature: dict, feeds: Sequence[Dict],
                 signature_name: str = SERVING_SIGNATURE) -> int:
    """assets.extra/tf_serving_warmup_requests: PredictionLog records (at most 1000)."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    feeds = list(feeds)[:MAX_WARMUP]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for feed in feeds:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name))
            for name, value in feed.items():
                dtype = signature["inputs"][name]["dtype"]
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value, dtype=dtype))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return len(feeds)


def synthesize_feeds(signature: dict, count: int, batch: int = 1,
                     examples_dir: Optional[str] = None) -> List[Dict]:
    """Warmup inputs: from Examples when given, else within each input's dtype."""
    from tfx_bridge import examples
    from tfx_bridge.tensorspec import TensorSpec, make_inputs

    specs = []
    for name, s in sorted(signature["inputs"].items()):
        shape = s["shape"] or [None]
        dims = tuple(-1 if d is None else int(d) for d in shape)
        dims = (-1,) + dims[1:]
        specs.append(TensorSpec(name, s["dtype"], dims))
    if examples_dir:
        real = examples.inputs_from_examples(examples_dir, specs, count * batch,
                                             PusherConfigError)
        if real and examples.tile_rows(real, batch) is not None:
            return [examples.tile_rows(real, batch, start=i * batch) for i in range(count)]
    return [make_inputs(specs, batch, seed=i) for i in range(count)]


# --------------------------------------------------------------------------- publish


@dataclasses.dataclass
class State:
    """Per model: labels -> version, the highest version ever issued, content digests,
    and the TF Serving flags its versions need (the manifest is written from these)."""

    labels: Dict[str, int] = dataclasses.field(default_factory=dict)
    last_version: int = 0
    digests: Dict[str, str] = dataclasses.field(default_factory=dict)
    server_flags: List[str] = dataclasses.field(default_factory=list)

    @classmethod
    def load(cls, model_root: str) -> State:
        path = os.path.join(model_root, STATE_FILE)
        if not os.path.exists(path):
            return cls()
        with open(path) as f:
            doc = json.load(f)
        return cls({k: int(v) for k, v in doc.get("labels", {}).items()},
                   int(doc.get("last_version", 0)), dict(doc.get("digests", {})),
                   sorted(str(f) for f in doc.get("server_flags", [])))

    def save(self, model_root: str) -> None:
        _atomic_write(os.path.join(model_root, STATE_FILE),
                      json.dumps({"labels": self.labels, "last_version": self.last_version,
                                  "digests": self.digests, "server_flags": self.server_flags},
                                 indent=2, sort_keys=True))


def model_digest(saved_model_dir: str) -> str:
    """sha256 over every file's path and bytes (what decides "the same model")."""
    import hashlib

    h = hashlib.sha256()
    for root, dirs, files in os.walk(saved_model_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, saved_model_dir).encode() + b"\0")
            with open(path, "rb") as f:
                for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))


@contextlib.contextmanager
def push_lock(model_root: str, timeout_s: float = 600.0):
    """An exclusive lock in the base path (flock: released if the holder dies)."""
    os.makedirs(model_root, exist_ok=True)
    fd = os.open(os.path.join(model_root, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise PushLocked(
                        f"Another push holds {model_root}/{LOCK_FILE} for over {timeout_s}s "
                        "(a lock, not bad input): retry when it finishes.") from e
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def versions(model_root: str) -> List[int]:
    """Integer-named version folders (what TF Serving sees)."""
    if not os.path.isdir(model_root):
        return []
    return sorted(int(d) for d in os.listdir(model_root)
                  if d.isdigit() and os.path.isdir(os.path.join(model_root, d)))


def _copy_tree_synced(src: str, dst: str) -> None:
    """Copies a SavedModel, saved_model.pb last, fsyncing every file and folder."""
    last = None
    for root, _dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        target_dir = os.path.join(dst, rel) if rel != "." else dst
        os.makedirs(target_dir, exist_ok=True)
        for name in files:
            if rel == "." and name == "saved_model.pb":
                last = os.path.join(root, name)
                continue
            _copy_synced(os.path.join(root, name), os.path.join(target_dir, name))
    if last is None:
        raise PushRefused(f"{src} has no saved_model.pb.")
    _copy_synced(last, os.path.join(dst, "saved_model.pb"))
    for root, _, _ in os.walk(dst, topdown=False):
        _fsync_dir(root)


def _copy_synced(src: str, dst: str) -> None:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        os.fsync(fout.fileno())


def publish(saved_model_dir: str, base_path: str, model_name: str,
            warmup_file: Optional[str] = None, label: Optional[str] = "stable",
            digest: Optional[str] = None, lock_timeout_s: float = 600.0) -> int:
    """Stages, fsyncs and renames into the next version; returns it."""
    if _is_remote(base_path):
        return _publish_object_store(saved_model_dir, base_path, model_name, warmup_file, label)
    model_root = os.path.join(base_path, model_name)
    os.makedirs(model_root, exist_ok=True)
    staging = os.path.join(model_root, f"{STAGING_PREFIX}{uuid.uuid4().hex}")
    try:
        _copy_tree_synced(saved_model_dir, staging)
        if warmup_file:
            os.makedirs(os.path.join(staging, WARMUP_DIR), exist_ok=True)
            _copy_synced(warmup_file, os.path.join(staging, WARMUP_DIR, WARMUP_FILE))
            _fsync_dir(os.path.join(staging, WARMUP_DIR))
            _fsync_dir(staging)
        with push_lock(model_root, lock_timeout_s):
            state = State.load(model_root)
            version = max([state.last_version, *versions(model_root)]) + 1
            # Issue the number first: a crash after this wastes a number, never reuses one.
            state.last_version = version
            state.save(model_root)
            os.rename(staging, os.path.join(model_root, str(version)))
            _fsync_dir(model_root)
            if digest is not None:
                state.digests[str(version)] = digest
            if label is not None:
                state.labels[label] = version
                if "stable" not in state.labels:
                    state.labels["stable"] = version
            state.save(model_root)
        return version
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)


def _publish_object_store(saved_model_dir, base_path, model_name, warmup_file, label) -> int:
    """gs:// and friends: no atomic rename; write the version with saved_model.pb last."""
    import tensorflow as tf

    model_root = f"{base_path.rstrip('/')}/{model_name}"
    existing = [int(os.path.basename(p.rstrip("/"))) for p in tf.io.gfile.glob(f"{model_root}/*")
                if os.path.basename(p.rstrip("/")).isdigit()]
    version = max(existing, default=0) + 1
    target = f"{model_root}/{version}"
    last = None
    for root, _, files in tf.io.gfile.walk(saved_model_dir):
        rel = os.path.relpath(root, saved_model_dir)
        for name in files:
            src = f"{root}/{name}"
            if rel == "." and name == "saved_model.pb":
                last = src
                continue
            dst = f"{target}/{rel}/{name}" if rel != "." else f"{target}/{name}"
            tf.io.gfile.makedirs(os.path.dirname(dst))
            tf.io.gfile.copy(src, dst, overwrite=True)
    if warmup_file:
        tf.io.gfile.makedirs(f"{target}/{WARMUP_DIR}")
        tf.io.gfile.copy(warmup_file, f"{target}/{WARMUP_DIR}/{WARMUP_FILE}", overwrite=True)
    tf.io.gfile.copy(last, f"{target}/saved_model.pb", overwrite=True)
    return version


def clean_stale_staging(model_root: str) -> List[str]:
    """Removes staging folders of pushes that died (call while holding the lock)."""
    removed = []
    if not os.path.isdir(model_root):
        return removed
    for d in os.listdir(model_root):
        if d.startswith(STAGING_PREFIX):
            shutil.rmtree(os.path.join(model_root, d), ignore_errors=True)
            removed.append(d)
    return removed


def apply_retention(model_root: str, keep: int) -> List[int]:
    """Keeps the newest ``keep`` versions and every labeled one; returns removed."""
    if keep < 1:
        raise PusherConfigError(f"keep_versions must be >= 1, got {keep}.")
    state = State.load(model_root)
    labeled = set(state.labels.values())
    all_versions = versions(model_root)
    keep_set = set(all_versions[-keep:]) | labeled
    removed = [v for v in all_versions if v not in keep_set]
    for v in removed:
        # Rename away first, so Serving never sees a half-deleted integer folder.
        doomed = os.path.join(model_root, f"{STAGING_PREFIX}delete-{v}-{uuid.uuid4().hex}")
        os.rename(os.path.join(model_root, str(v)), doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return removed


def set_label(base_path: str, model_name: str, label: str, version: int) -> None:
    model_root = os.path.join(base_path, model_name)
    if label not in LABELS:
        raise PusherConfigError(f"label {label!r}: use one of {LABELS}.")
    with push_lock(model_root):
        if version not in versions(model_root):
            raise PusherConfigError(
                f"{model_name} has no version {version} under {base_path}; versions: "
                f"{versions(model_root)}.")
        if not os.path.exists(os.path.join(model_root, str(version), "saved_model.pb")):
            raise PushRefused(f"{model_root}/{version} is incomplete (no saved_model.pb).")
        state = State.load(model_root)
        state.labels[label] = version
        state.save(model_root)


# --------------------------------------------------------------------------- configs


def models_config_text(base_path: str, server_base_path: str = SERVER_MOUNT) -> str:
    """ModelServerConfig for every model under ``base_path``, checked by parsing.

    Each model's ``base_path`` is where the *server* sees it:
    ``<server_base_path>/<name>`` (the manifest mounts ``base_path`` there).
    """
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2 as msc

    config = msc.ModelServerConfig()
    for name in sorted(os.listdir(base_path)):
        root = os.path.join(base_path, name)
        if not os.path.isdir(root) or not versions(root):
            continue
        state = State.load(root)
        entry = config.model_config_list.config.add(
            name=name, base_path=f"{server_base_path.rstrip('/')}/{name}",
            model_platform="tensorflow")
        live = sorted(set(state.labels.values()) | {versions(root)[-1]})
        entry.model_version_policy.specific.versions.extend(live)
        for label, version in sorted(state.labels.items()):
            entry.version_labels[label] = version
    text = text_format.MessageToString(config)
    text_format.Parse(text, msc.ModelServerConfig())  # round-trip: what we write parses
    return text


def _batching_message():
    """BatchingParameters, built from its .proto fields (tensorflow-serving-api ships no
    Python module for it), so the text we write is checked by a real parser."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    fdp = descriptor_pb2.FileDescriptorProto(name="tfx_bridge_batching.proto",
                                             package="tensorflow.serving",
                                             dependency=["google/protobuf/wrappers.proto"])
    msg = fdp.message_type.add(name="BatchingParameters")
    fields = [("max_batch_size", 1, ".google.protobuf.Int64Value"),
              ("batch_timeout_micros", 2, ".google.protobuf.Int64Value"),
              ("max_enqueued_batches", 3, ".google.protobuf.Int64Value"),
              ("num_batch_threads", 4, ".google.protobuf.Int64Value"),
              ("thread_pool_name", 5, ".google.protobuf.StringValue"),
              ("pad_variable_length_inputs", 7, None)]
    T = descriptor_pb2.FieldDescriptorProto
    for name, number, type_name in fields:
        if type_name:
            msg.field.add(name=name, number=number, type=T.TYPE_MESSAGE, type_name=type_name,
                          label=T.LABEL_OPTIONAL)
        else:
            msg.field.add(name=name, number=number, type=T.TYPE_BOOL, label=T.LABEL_OPTIONAL)
    msg.field.add(name="allowed_batch_sizes", number=6, type=T.TYPE_INT64,
                  label=T.LABEL_REPEATED)
    pool.Add(fdp)
    descriptor = pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def batching_text(target: str, overrides: Optional[dict] = None) -> str:
    """BatchingParameters text: the defaults for ``target`` plus ``overrides``."""
    from google.protobuf import text_format

    params = dict(BATCHING_DEFAULTS[target])
    unknown = set(overrides or {}) - _BATCHING_FIELDS
    if unknown:
        raise PusherConfigError(f"Unknown batching fields {sorted(unknown)}; known: "
                                f"{sorted(_BATCHING_FIELDS)}.")
    params.update(overrides or {})
    message = _batching_message()()
    for key, value in params.items():
        if key == "pad_variable_length_inputs":
            message.pad_variable_length_inputs = bool(value)
        elif key == "allowed_batch_sizes":
            message.allowed_batch_sizes.extend(int(v) for v in value)
        elif key == "thread_pool_name":
            message.thread_pool_name.value = str(value)
        else:
            getattr(message, key).value = int(value)
    return text_format.MessageToString(message)


def monitoring_text() -> str:
    return f'prometheus_config {{\n  enable: true\n  path: "{PROMETHEUS_PATH}"\n}}\n'


def k8s_manifest(base_path: str, target: str, flags: Sequence[str],
                 app: str = "tf-serving", server_base_path: str = SERVER_MOUNT) -> str:
    """Deployment + Service for tensorflow/serving, built as data and dumped with PyYAML.

    ``base_path`` is mounted at ``server_base_path``, where models.config points.
    """
    import yaml

    mount = server_base_path.rstrip("/")
    args = ["--port=8500", "--rest_api_port=8501",
            f"--model_config_file={mount}/{MODELS_CONFIG}",
            "--model_config_file_poll_wait_seconds=60", "--enable_batching",
            f"--batching_parameters_file={mount}/{BATCHING_FILE}",
            f"--monitoring_config_file={mount}/{MONITORING_FILE}"]
    args += sorted(set(flags) & set(SERVER_FLAGS))
    limits = {"cpu": "4", "memory": "8Gi"}
    if target == "gpu":
        limits["nvidia.com/gpu"] = 1
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}, "annotations": {
                    "prometheus.io/scrape": "true", "prometheus.io/port": "8501",
                    "prometheus.io/path": PROMETHEUS_PATH}},
                "spec": {
                    "containers": [{
                        "name": "serving", "image": SERVING_IMAGE[target], "args": args,
                        "ports": [{"containerPort": 8500, "name": "grpc"},
                                  {"containerPort": 8501, "name": "http"}],
                        "readinessProbe": {"httpGet": {"path": "/v1/models", "port": 8501}},
                        "resources": {"limits": limits},
                        "volumeMounts": [{"name": "models", "mountPath": mount}]}],
                    "volumes": [{"name": "models",
                                 "hostPath": {"path": os.path.abspath(base_path)}}]}}}}
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": app},
        "spec": {"selector": {"app": app},
                 "ports": [{"name": "grpc", "port": 8500}, {"name": "http", "port": 8501}]}}
    header = f"# TF Serving for the models under {base_path} (mounted at {mount}).\n"
    return header + yaml.safe_dump_all([deployment, service], sort_keys=False)


def server_flags(base_path: str) -> List[str]:
    """Every flag some served model under ``base_path`` needs (from the models' states)."""
    flags = set()
    for name in sorted(os.listdir(base_path)) if os.path.isdir(base_path) else []:
        root = os.path.join(base_path, name)
        if os.path.isdir(root) and not name.startswith("."):
            flags |= set(State.load(root).server_flags)
    return sorted(flags & set(SERVER_FLAGS))


def write_configs(base_path: str, target: str, batching_overrides: Optional[dict] = None,
                  server_base_path: str = SERVER_MOUNT) -> Dict[str, str]:
    """Rewrites the server configs. The manifest carries every flag a served version
    needs (from the models' states; each flag in SERVER_FLAGS is safe for models that
    do not need it), so a later push or a rollback never drops one."""
    files = {MODELS_CONFIG: models_config_text(base_path, server_base_path),
             BATCHING_FILE: batching_text(target, batching_overrides),
             MONITORING_FILE: monitoring_text(),
             K8S_MANIFEST: k8s_manifest(base_path, target, server_flags(base_path),
                                        server_base_path=server_base_path)}
    for name, text in files.items():
        _atomic_write(os.path.join(base_path, name), text)
    return {name: os.path.join(base_path, name) for name in files}


# --------------------------------------------------------------------------- push


@dataclasses.dataclass
class PushResult:
    pushed: bool
    version: Optional[int]
    destination: Optional[str]
    reason: str
    details: dict


def push(saved_model_dir: str, base_path: str, model_name: str, label: str = "stable",
         target: str = "cpu", requires_gpu: bool = False,
         serving_flags: Sequence[str] = (), examples_dir: Optional[str] = None,
         allow_contract_change: bool = False, keep_versions: int = 5,
         warmup_records: int = 10, blessings: Optional[Dict[str, Optional[int]]] = None,
         batching_overrides: Optional[dict] = None,
         server_base_path: str = SERVER_MOUNT, lock_timeout_s: float = 600.0) -> PushResult:
    """Gate, check, warm up, publish atomically, then write configs and retain.

    ``blessings`` maps a gate's name to its ``blessed`` value (None: the gate
    carries no blessing). A failed gate or check is a not-pushed result with
    the reason, not an exception. ``server_base_path`` is where the server sees
    ``base_path`` (the manifest's mount; models.config points there).
    """
    import tempfile

    if label not in LABELS:
        raise PusherConfigError(f"label {label!r}: use one of {LABELS}.")
    if not 1 <= warmup_records <= MAX_WARMUP:
        raise PusherConfigError(f"warmup_records must be in [1, {MAX_WARMUP}].")
    if not os.path.exists(os.path.join(saved_model_dir, "saved_model.pb")):
        raise PusherConfigError(f"{saved_model_dir} has no saved_model.pb.")
    unblessed = sorted(k for k, v in (blessings or {}).items() if v != 1)
    if unblessed:
        return PushResult(False, None, None,
                          f"not blessed by {', '.join(unblessed)}; nothing pushed", {})
    try:
        check_target(target, requires_gpu, serving_flags)
        new_sig = serving_signature(saved_model_dir)
        model_root = os.path.join(base_path, model_name)
        state = State.load(model_root)
        served = state.labels.get("stable") or (versions(model_root) or [None])[-1]
        digest = model_digest(saved_model_dir)
        same = state.labels.get(label)
        if same is not None and state.digests.get(str(same)) == digest and \
                same in versions(model_root):
            # A rerun with nothing new (e.g. a re-blessed, unchanged model) adds no version.
            return PushResult(True, same, os.path.join(model_root, str(same)),
                              f"identical to version {same} already served as {label}; "
                              "no new version", {"labels": state.labels})
        if served is not None and not allow_contract_change:
            problems = contract_changes(
                serving_signature(os.path.join(model_root, str(served))), new_sig)
            if problems:
                raise PushRefused(
                    f"The contract of {model_name} version {served} would break: "
                    + "; ".join(problems)
                    + ". Keep the inputs and outputs, or push with allow_contract_change.")
        with tempfile.TemporaryDirectory(prefix="tfx-bridge-warmup-") as tmp:
            warmup = os.path.join(tmp, WARMUP_FILE)
            count = write_warmup(warmup, model_name, new_sig,
                                 synthesize_feeds(new_sig, warmup_records,
                                                  examples_dir=examples_dir))
            # One fresh process: the model loads, and the warmup requests run through it.
            inspected = inspect_model(saved_model_dir, warmup)
            check_tflite(inspected, new_sig)
            replay = dict(inspected["warmup"] or {})
            if inspected.get("tflite"):
                replay["tflite"] = inspected["tflite"]["warmup"]
            with push_lock(model_root, lock_timeout_s):
                clean_stale_staging(model_root)
            version = publish(saved_model_dir, base_path, model_name, warmup, label, digest,
                              lock_timeout_s)
    except PushRefused as e:
        return PushResult(False, None, None, str(e), {})
    with push_lock(os.path.join(base_path, model_name), lock_timeout_s):
        model_root = os.path.join(base_path, model_name)
        removed = apply_retention(model_root, keep_versions)
        # The flags stay recorded while any version may be served (a rollback to it).
        state = State.load(model_root)
        state.server_flags = sorted(set(state.server_flags)
                                    | (set(serving_flags) & set(SERVER_FLAGS)))
        state.save(model_root)
        configs = write_configs(base_path, target, batching_overrides, server_base_path)
    destination = os.path.join(base_path, model_name, str(version))
    return PushResult(True, version, destination, f"pushed as version {version} ({label})",
                      {"warmup": {"records": count, **(replay or {})},
                       "removed_versions": removed, "configs": configs,
                       "labels": State.load(os.path.join(base_path, model_name)).labels})


def rollback(base_path: str, model_name: str, to_version: int, target: str = "cpu",
             server_base_path: str = SERVER_MOUNT) -> dict:
    """Moves the ``stable`` label to ``to_version`` and rewrites the configs."""
    set_label(base_path, model_name, "stable", to_version)
    with push_lock(os.path.join(base_path, model_name)):
        write_configs(base_path, target, server_base_path=server_base_path)
    return State.load(os.path.join(base_path, model_name)).labels
