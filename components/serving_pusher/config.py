"""ServingPusher's settings, declared once: defaults and checks in one frozen object
that the component, the executor and the CLI all build (stored as JSON in one
execution parameter). No TFX imports.

Example:
    >>> config = PusherConfig(base_path="/serving/models", model_name="ctr", label="canary")
    >>> PusherConfig.from_json(config.to_json()) == config
    True
    >>> PusherConfig(base_path="/serving/models", model_name="ctr", warmup_records=0)
    Traceback (most recent call last):
    ...
    tfx_bridge.components.serving_pusher.errors.PusherConfigError: ServingPusher: ...
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional

from tfx_bridge.components.serving_pusher.base_layout import (
    BATCHING_DEFAULTS,
    BATCHING_FIELDS,
    DEFAULT_KEEP_VERSIONS,
    DEFAULT_WARMUP_RECORDS,
    LABELS,
    MAX_WARMUP,
    SERVER_MOUNT,
    TARGETS,
)
from tfx_bridge.components.serving_pusher.errors import PusherConfigError
from tfx_bridge.components.serving_pusher.publisher import publisher_kind
from tfx_bridge.components.serving_pusher.tuning import batching_problems
from tfx_bridge.config import Config
from tfx_bridge.cpu_allocator import ALLOCATORS
from tfx_bridge.errors import BridgeError
from tfx_bridge.serving_threads import CALLER_THREAD
from tfx_bridge.storage.names import check_segment, uri_problem


def check_model_name(model_name: str) -> str:
    """A model name is a folder under the base path and a key in models.config: one safe
    path segment, and not a number (TF Serving would read it as a version)."""
    check_segment(model_name, "Model name")
    if model_name.isdigit():
        raise PusherConfigError(
            f"Model name {model_name!r} is a number: TF Serving reads integer folders as "
            "versions. Use a name such as 'ctr'.")
    return model_name


def base_path_problem(base_path: str) -> Optional[str]:
    """Local folders and ``s3://`` only (:func:`publisher.publisher_kind`): publishing
    on an object store needs conditional writes, which the filesystem layer has for s3;
    a push must never fall back to a local folder named ``gs:``."""
    why = uri_problem(base_path)
    if why:
        return f"base path {why}"
    if publisher_kind(base_path) is None:
        return (f"base path {base_path}: ServingPusher publishes to local or mounted folders "
                "and to s3:// (versions are taken by conditional writes, which tfx-bridge "
                "implements for S3 only). Push to s3://, or to a folder the server mounts "
                "(e.g. a GCS FUSE volume)")
    return None


@dataclasses.dataclass(frozen=True)
class PusherConfig(Config):
    """Where a model is pushed and how it is served (docs/ARCHITECTURE.md, ServingPusher)."""

    COMPONENT = "ServingPusher"
    ERROR = PusherConfigError
    # Seconds a push waits for another push's lock on the model or the base path
    # before it gives up as busy (exit 4); the CLI's --lock-timeout default.
    LOCK_TIMEOUT_S = 600.0

    base_path: str
    model_name: str
    label: str = "stable"
    target: str = "cpu"
    # Push even when serving_default's inputs or outputs differ from the served version's.
    allow_contract_change: bool = False
    keep_versions: int = DEFAULT_KEEP_VERSIONS
    warmup_records: int = DEFAULT_WARMUP_RECORDS
    # BatchingParameters fields; each one given wins over the value derived from the
    # model's measured latency or the target's default (docs/guides/serving-config.md).
    batching_parameters: Optional[dict] = None
    # Cores of the machine that serves: session thread pools, batch threads and the
    # manifest's CPU limit. None: the cores this process may use, read when it pushes.
    target_cores: Optional[int] = None
    # TF Serving's session thread pools (None: target_cores each).
    intra_op_parallelism: Optional[int] = None
    inter_op_parallelism: Optional[int] = None
    # TensorFlow's CPU allocator in the server ("bfc" or "malloc"; None: bfc on cpu
    # targets, malloc on gpu ones). Set in the manifest's environment.
    cpu_allocator: Optional[str] = None
    # Where the server sees base_path (the manifest's mount; models.config points there).
    server_base_path: str = SERVER_MOUNT

    def problems(self) -> List[str]:
        problems = []
        try:
            check_model_name(self.model_name)
        except BridgeError as e:
            problems.append(str(e).rstrip("."))
        why = base_path_problem(self.base_path)
        if why:
            problems.append(why)
        if self.label not in LABELS:
            problems.append(f"label {self.label!r}: use one of {list(LABELS)}")
        if self.target not in TARGETS:
            problems.append(f"target {self.target!r}: use one of {list(TARGETS)}")
        if self.keep_versions < 1:
            problems.append(f"keep_versions must be >= 1, got {self.keep_versions}")
        if not 1 <= self.warmup_records <= MAX_WARMUP:
            problems.append(f"warmup_records {self.warmup_records}: use 1 to {MAX_WARMUP} "
                            "(TF Serving replays them at load; a push always writes warmup)")
        for name in ("target_cores", "intra_op_parallelism", "inter_op_parallelism"):
            value = getattr(self, name)
            if name == "inter_op_parallelism" and value == CALLER_THREAD:
                continue  # each call in its calling thread (serving-config.md)
            if value is not None and value < 1:
                extra = (f", or {CALLER_THREAD} to run each call in its calling thread"
                         if name == "inter_op_parallelism" else "")
                problems.append(f"{name} must be >= 1 (a count of cores or threads){extra}, "
                                f"got {value}; leave it out for this host's usable cores")
        if self.cpu_allocator is not None and self.cpu_allocator not in ALLOCATORS:
            problems.append(f"cpu_allocator {self.cpu_allocator!r}: use one of "
                            f"{list(ALLOCATORS)}, or leave it out (bfc on cpu targets)")
        unknown = sorted(set(self.batching_parameters or {}) - BATCHING_FIELDS)
        if unknown:
            problems.append(f"unknown batching fields {unknown}; known: "
                            f"{sorted(BATCHING_FIELDS)}")
        elif self.target in TARGETS:
            # Checked over the defaults: derived batch sizes never mix with given ones.
            problems += batching_problems({**BATCHING_DEFAULTS[self.target],
                                           **(self.batching_parameters or {})})
        return problems
