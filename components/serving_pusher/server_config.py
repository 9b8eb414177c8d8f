"""Server files under the base path: models.config, batching, monitoring, Kubernetes manifest.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from tfx_bridge.artifacts.savedmodel import SERVER_FLAGS
from tfx_bridge.components.serving_pusher.base_layout import (
    BATCHING_DEFAULTS,
    BATCHING_FIELDS,
    BATCHING_FILE,
    K8S_MANIFEST,
    MODELS_CONFIG,
    MONITORING_FILE,
    PROMETHEUS_PATH,
    SERVER_MOUNT,
    SERVING_IMAGE,
)
from tfx_bridge.components.serving_pusher.errors import (
    PusherConfigError,
)
from tfx_bridge.components.serving_pusher.publisher import publisher_for
from tfx_bridge.components.serving_pusher.state import State, versions
from tfx_bridge.components.serving_pusher.tuning import (
    Session,
    batching_problems,
)
from tfx_bridge.serving_threads import usable_cores
from tfx_bridge.storage import fs

# The server container's memory limit in the manifest; the CPU allocator's arena is
# capped below it (cpu_allocator.ARENA_SHARE).
MEMORY_LIMIT_MB = 8192


def models_config_text(base_path: str, server_base_path: str = SERVER_MOUNT) -> str:
    """ModelServerConfig for every model under ``base_path``, checked by parsing.

    Each model's ``base_path`` is where the *server* sees it:
    ``<server_base_path>/<name>`` (the manifest mounts ``base_path`` there).
    """
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2 as msc

    config = msc.ModelServerConfig()
    for name in sorted(fs.listdir(base_path)):
        root = fs.join(base_path, name)
        present = [] if name.startswith(".") else versions(root)  # .staging/ on s3
        if not present:
            continue
        state = State.load(root)
        entry = config.model_config_list.config.add(
            name=name, base_path=f"{server_base_path.rstrip('/')}/{name}",
            model_platform="tensorflow")
        live = sorted(set(state.labels.values()) | {present[-1]})
        entry.model_version_policy.specific.versions.extend(live)
        for label, version in sorted(state.labels.items()):
            entry.version_labels[label] = version
    text = text_format.MessageToString(config)
    text_format.Parse(text, msc.ModelServerConfig())  # round-trip: what we write parses
    return text


def batching_message():
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
              ("pad_variable_length_inputs", 7, None),
              ("enable_large_batch_splitting", 8, ".google.protobuf.BoolValue"),
              ("max_execution_batch_size", 9, ".google.protobuf.Int64Value")]
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
    """BatchingParameters text: the defaults for ``target`` plus ``overrides``, refused
    (PusherConfigError) where TF Serving would refuse to load the model with it."""
    from google.protobuf import text_format

    params = dict(BATCHING_DEFAULTS[target])
    unknown = set(overrides or {}) - BATCHING_FIELDS
    if unknown:
        raise PusherConfigError(f"Unknown batching fields {sorted(unknown)}; known: "
                                f"{sorted(BATCHING_FIELDS)}.")
    params.update(overrides or {})
    problems = batching_problems(params)
    if problems:
        raise PusherConfigError("; ".join(problems) + ".")
    message = batching_message()()
    for key, value in params.items():
        if key == "pad_variable_length_inputs":
            message.pad_variable_length_inputs = bool(value)
        elif key == "allowed_batch_sizes":
            message.allowed_batch_sizes.extend(int(v) for v in value)
        elif key == "thread_pool_name":
            message.thread_pool_name.value = str(value)
        elif key == "enable_large_batch_splitting":
            message.enable_large_batch_splitting.value = bool(value)
        else:
            getattr(message, key).value = int(value)
    return text_format.MessageToString(message)


def monitoring_text() -> str:
    return f'prometheus_config {{\n  enable: true\n  path: "{PROMETHEUS_PATH}"\n}}\n'


def k8s_manifest(base_path: str, target: str, flags: Sequence[str],
                 app: str = "tf-serving", server_base_path: str = SERVER_MOUNT,
                 session: Optional[Session] = None) -> str:
    """Deployment + Service for tensorflow/serving, built as data and dumped with PyYAML.

    ``base_path`` is mounted at ``server_base_path``, where models.config points,
    by the volume its publisher names (a host path, or an object-store driver's).
    ``session`` sets the server's thread pools and the container's CPU limit (default:
    this host's usable cores): left to itself TF Serving sizes its pools by the
    node's cores, not the container's limit. Its CPU allocator is the container's
    environment, the arena capped below the memory limit (cpu_allocator.py);
    without a session, TF's own allocator (a state recorded before pushes chose one).
    """
    import yaml

    mount = server_base_path.rstrip("/")
    volume, storage = publisher_for(base_path).server_volume(base_path, app)
    args = ["--port=8500", "--rest_api_port=8501",
            f"--model_config_file={mount}/{MODELS_CONFIG}",
            "--model_config_file_poll_wait_seconds=60", "--enable_batching",
            f"--batching_parameters_file={mount}/{BATCHING_FILE}",
            f"--monitoring_config_file={mount}/{MONITORING_FILE}"]
    args += sorted(set(flags) & set(SERVER_FLAGS))
    session = session or Session(usable_cores(), usable_cores(), usable_cores())
    args += session.flags()
    env = session.env(MEMORY_LIMIT_MB)
    limits = {"cpu": str(session.cores), "memory": f"{MEMORY_LIMIT_MB // 1024}Gi"}
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
                        **({"env": [{"name": k, "value": v} for k, v in env.items()]}
                           if env else {}),
                        "volumeMounts": [{"name": "models", "mountPath": mount}]}],
                    "volumes": [{"name": "models", **volume}]}}}}
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": app},
        "spec": {"selector": {"app": app},
                 "ports": [{"name": "grpc", "port": 8500}, {"name": "http", "port": 8501}]}}
    header = f"# TF Serving for the models under {base_path} (mounted at {mount}).\n"
    return header + yaml.safe_dump_all([*storage, deployment, service], sort_keys=False)


def server_flags(base_path: str) -> List[str]:
    """Every flag some served model under ``base_path`` needs (from the models' states)."""
    flags = set()
    for name in sorted(fs.listdir(base_path)) if fs.isdir(base_path) else []:
        root = fs.join(base_path, name)
        if not name.startswith(".") and fs.isdir(root):
            flags |= set(State.load(root).server_flags)
    return sorted(flags & set(SERVER_FLAGS))


def write_configs(base_path: str, target: str, batching_overrides: Optional[dict] = None,
                  server_base_path: str = SERVER_MOUNT,
                  session: Optional[Session] = None) -> Dict[str, str]:
    """Rewrites the server configs. The manifest carries every flag a served version
    needs (from the models' states; each flag in SERVER_FLAGS is safe for models that
    do not need it), so a later push or a rollback never drops one.

    Every file is computed from the models' states at the time it is written (by
    the base path's publisher): on disk under the base path's lock, on an object
    store by a conditional write recomputed when another push wrote first. Either
    way a push of another model running at the same time cannot leave its version
    out of models.config.

    ``batching_overrides`` and ``session`` are the pushing model's (:mod:`tuning`):
    one server, one batching file and one set of thread pools for every model under
    the base path.
    """
    makers = {
        MODELS_CONFIG: lambda: models_config_text(base_path, server_base_path),
        BATCHING_FILE: lambda: batching_text(target, batching_overrides),
        MONITORING_FILE: monitoring_text,
        K8S_MANIFEST: lambda: k8s_manifest(base_path, target, server_flags(base_path),
                                           server_base_path=server_base_path,
                                           session=session),
    }
    return publisher_for(base_path).write_files(base_path, makers)
