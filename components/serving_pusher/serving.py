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
  <base>/<name>/.push.lock           serializes concurrent pushers (local disk)
  <base>/.staging/, <name>/.versions/  in-progress uploads, version markers (s3)

On disk a push copies into a staging folder, fsyncs every file and folder,
then renames it to the next integer version under the lock: a push killed at
any moment leaves no incomplete integer-named version and earlier versions
untouched; versions are monotonic and unique across concurrent pushers and
clock changes (a counter, never the time). An ``s3://`` base path has no lock
and no rename: :mod:`object_store_publisher` gives the same guarantees with
conditional writes (numbers taken by a create-if-absent marker, saved_model.pb
copied last, state and configs rewritten only if unchanged since read); the
base path's publisher (:mod:`publisher`) is chosen once from its scheme.
``gs://`` base paths are refused.

The pieces: ``base_layout`` (names and defaults), ``gates`` (blessings and the
model's identity), ``checks`` (fresh-process load, contract, TFLite, target),
``warmup``, ``publisher`` (one per storage kind: ``publish`` on local disk,
``object_store_publisher`` on s3), ``state`` (state, versions, labels),
``server_config`` (models.config, batching,
monitoring, manifest), ``tuning`` (session threads and batching from the target's
cores and the model's measured latency); this module's ``push_model`` (what the executor and
``tfx-bridge push`` call), ``push`` and ``rollback`` run them.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence

from tfx_bridge.artifacts.model_facts import model_facts
from tfx_bridge.artifacts.savedmodel import SERVER_FLAGS, resolve_saved_model
from tfx_bridge.components.serving_pusher import gates
from tfx_bridge.components.serving_pusher.base_layout import (
    DEFAULT_KEEP_VERSIONS,
    PUSH_REPORT,
    SERVER_MOUNT,
    WARMUP_FILE,
)
from tfx_bridge.components.serving_pusher.checks import (
    check_runs_on,
    check_target,
    check_tflite,
    contract_changes,
    inspect_model,
    serving_signature,
)
from tfx_bridge.components.serving_pusher.config import (
    PusherConfig,
    base_path_problem,
    check_model_name,
)
from tfx_bridge.components.serving_pusher.errors import (
    PusherConfigError,
    PushRefused,
)
from tfx_bridge.components.serving_pusher.publish import AlreadyPublished, model_digest
from tfx_bridge.components.serving_pusher.publisher import publisher_for
from tfx_bridge.components.serving_pusher.server_config import (
    batching_text,
    models_config_text,
    write_configs,
)
from tfx_bridge.components.serving_pusher.state import (
    State,
    set_label,
    update_state,
    versions,
)
from tfx_bridge.components.serving_pusher.tuning import Session, Tuning, tune
from tfx_bridge.components.serving_pusher.warmup import (
    synthesize_feeds,
    write_warmup,
)
from tfx_bridge.storage import fs
from tfx_bridge.storage.folders import unsafe_links
from tfx_bridge.storage.names import child


@dataclasses.dataclass
class PushResult:
    pushed: bool
    version: Optional[int]
    destination: Optional[str]
    reason: str
    details: dict

    def summary(self) -> dict:
        """What push.json holds: the outcome, then the details."""
        return {"pushed": self.pushed, "version": self.version,
                "destination": self.destination, "reason": self.reason, **self.details}


def check_base_path(base_path: str) -> None:
    """The base path's scheme (:func:`config.base_path_problem`) and, on an object
    store, the bucket and credentials, before any work."""
    why = base_path_problem(base_path)
    if why:
        raise PusherConfigError(why[0].upper() + why[1:] + ".")
    publisher_for(base_path).check_base_path(base_path)


def push_model(config: PusherConfig, model_dir: str, saved_model_dir: Optional[str] = None,
               imported_model_dir: Optional[str] = None, mark: Optional[int] = None,
               imported_mark: Optional[int] = None,
               other_gates: Optional[Dict[str, Optional[int]]] = None,
               examples_dir: Optional[str] = None,
               lock_timeout_s: float = PusherConfig.LOCK_TIMEOUT_S,
               report_dir: Optional[str] = None) -> PushResult:
    """The push both routes take: gates, identity, push, and the result written.

    ``model_dir`` is the Model folder (its report.json gives the verdict, the
    serving needs; :mod:`tfx_bridge.artifacts.model_facts`), ``saved_model_dir``
    the SavedModel in it (default: resolved from ``model_dir``).
    ``imported_model_dir`` is the importer's Model folder when one gates the
    push: its verdict gates (none fails closed) and its source digest with the
    serving flags names the model for the "nothing new" check (:mod:`gates`).
    ``mark`` and ``imported_mark`` are ``blessed`` properties set on those
    artifacts by anything else; ``other_gates`` maps other components' gate names
    to their ``blessed`` (None: not supplied). The result, with the blessings, is
    written to ``report_dir``/push.json when given. The server's threads and batching
    follow the latencies in ``model_dir``'s report (:mod:`tuning`).
    """
    if imported_model_dir is not None and not fs.isdir(imported_model_dir):
        # Read as "no verdict" it would fail the gate closed with a reason that hides
        # the typo.
        raise PusherConfigError(
            f"The imported model folder {imported_model_dir} does not exist. Give the "
            "importer's Model folder (the one holding its report.json), or leave it out.")
    facts = model_facts(model_dir)
    imported = model_facts(imported_model_dir) if imported_model_dir is not None else None
    blessings = gates.blessings(facts, mark, imported, imported_mark, other_gates)
    flags = list(facts.serving_flags)
    if saved_model_dir is None:
        # push() checks the folder's entries itself and records a refusal.
        saved_model_dir = resolve_saved_model(model_dir, check_entries=False)
    result = push(saved_model_dir, config, requires_gpu=facts.requires_gpu,
                  serving_flags=flags, examples_dir=examples_dir, blessings=blessings,
                  lock_timeout_s=lock_timeout_s, identity=gates.identity(imported, flags),
                  tuning=tune(config, model_dir),
                  representative_inputs=facts.representative_inputs)
    result.details = {"blessings": blessings, **result.details}
    if report_dir is not None:
        fs.write_text(fs.join(report_dir, PUSH_REPORT),
                      json.dumps(result.summary(), indent=2, default=str))
    return result


def push(saved_model_dir: str, config: PusherConfig, requires_gpu: bool = False,
         serving_flags: Sequence[str] = (), examples_dir: Optional[str] = None,
         blessings: Optional[Dict[str, Optional[int]]] = None,
         lock_timeout_s: float = PusherConfig.LOCK_TIMEOUT_S,
         identity: Optional[str] = None, tuning: Optional[Tuning] = None,
         representative_inputs: Sequence[str] = ()) -> PushResult:
    """:func:`push_local` for a model folder that may be a URI (an artifact under
    an ``s3://`` or ``gs://`` pipeline root): it is copied to a local folder
    first, so the checks, the fresh-process load and the copy see the same bytes.
    ``config.base_path`` may be ``s3://`` (see :mod:`object_store_publisher` for how a push is
    made safe there). The arguments are :func:`push_local`'s.
    """
    args = (requires_gpu, serving_flags, examples_dir, blessings, lock_timeout_s, identity,
            tuning, representative_inputs)
    if not fs.is_remote(saved_model_dir):
        return push_local(saved_model_dir, config, *args)
    # push_local checks this too; here it comes before the model is copied down.
    check_base_path(config.base_path)
    if not fs.isfile(fs.join(saved_model_dir, "saved_model.pb")):
        raise PusherConfigError(f"{saved_model_dir} has no saved_model.pb.")
    with fs.staged_locally(saved_model_dir, prefix="tfx-bridge-push-") as (local,):
        return push_local(local, config, *args)


def push_local(saved_model_dir: str, config: PusherConfig, requires_gpu: bool = False,
               serving_flags: Sequence[str] = (), examples_dir: Optional[str] = None,
               blessings: Optional[Dict[str, Optional[int]]] = None,
               lock_timeout_s: float = PusherConfig.LOCK_TIMEOUT_S,
               identity: Optional[str] = None, tuning: Optional[Tuning] = None,
               representative_inputs: Sequence[str] = ()) -> PushResult:
    """Gate, check, warm up, publish atomically, then write configs and retain.

    ``config`` is the component's one :class:`PusherConfig` (where, which label,
    target, retention, warmup, batching), checked when it was built.
    ``requires_gpu`` and ``serving_flags`` are the model's (its report).
    ``blessings`` maps a gate's name to its ``blessed`` value (None: the gate
    carries no blessing). A failed gate or check is a not-pushed result with
    the reason, not an exception.
    ``identity`` names the model for the "nothing new" check (a pipeline passes
    the importer's source digest with the optimizer's backend and flags); by
    default the SavedModel's bytes decide. ``tuning`` is what the server runs with
    (default: no latency measured, :func:`tuning.tune`). ``representative_inputs``
    (the model report's) size the warmup requests where the signature leaves sizes
    open.
    """
    import tempfile

    base_path, model_name, label, target = (config.base_path, config.model_name, config.label,
                                            config.target)
    tuning = tuning or tune(config)
    server_base_path = config.server_base_path
    check_base_path(base_path)
    publisher_for(base_path).check_model_root(child(base_path, model_name))
    if not fs.isfile(fs.join(saved_model_dir, "saved_model.pb")):
        raise PusherConfigError(f"{saved_model_dir} has no saved_model.pb.")
    # Every argument and the base path's state are checked before anything is published:
    # a push either completes (version, state, labels, configs) or changes nothing.
    check_target(target, serving_flags)
    batching_text(target, tuning.batching)
    if examples_dir is not None and not fs.isdir(examples_dir):
        raise PusherConfigError(
            f"Examples folder {examples_dir} does not exist: give an Examples artifact folder "
            "(Split-*/), or leave it out to synthesize warmup requests.")
    if fs.isfile(base_path):
        raise PusherConfigError(f"Base path {base_path} is a file; give a folder.")
    if fs.isdir(base_path):
        models_config_text(base_path, server_base_path)  # every model's state must be sound
    unblessed = sorted(k for k, v in (blessings or {}).items() if v != 1)
    if unblessed:
        return PushResult(False, None, None,
                          f"not blessed by {', '.join(unblessed)}; nothing pushed", {})
    links = unsafe_links(saved_model_dir)
    if links:
        return PushResult(False, None, None,
                          f"{saved_model_dir} has entries a server must not read: "
                          + "; ".join(links) + ". Copy the real files into the model folder "
                          "(no links leading out, no FIFOs or devices); nothing pushed", {})
    try:
        check_runs_on(target, requires_gpu)
        new_sig = serving_signature(saved_model_dir)
        model_root = fs.join(base_path, model_name)
        state = State.load(model_root)
        served = state.labels.get("stable") or (versions(model_root) or [None])[-1]
        # What decides "the same model": the bytes, or (from a pipeline) the model's
        # sources and optimizer choice, which a re-export does not reproduce byte for byte.
        digest = identity or model_digest(saved_model_dir)
        same = state.labels.get(label)
        if same is not None and state.digests.get(str(same)) == digest and \
                same in versions(model_root):
            return _identical(base_path, model_name, same, label, target, tuning,
                              server_base_path, lock_timeout_s)
        if served is not None and not config.allow_contract_change:
            problems = contract_changes(
                _served_signature(fs.join(model_root, str(served))), new_sig)
            if problems:
                raise PushRefused(
                    f"The contract of {model_name} version {served} would break: "
                    + "; ".join(problems)
                    + ". Keep the inputs and outputs, or push with allow_contract_change.")
        with tempfile.TemporaryDirectory(prefix="tfx-bridge-warmup-") as tmp:
            warmup = os.path.join(tmp, WARMUP_FILE)
            count = write_warmup(warmup, model_name, new_sig,
                                 synthesize_feeds(new_sig, config.warmup_records,
                                                  examples_dir=examples_dir,
                                                  representative=representative_inputs))
            # One fresh process: the model loads, and the warmup requests run through it.
            inspected = inspect_model(saved_model_dir, warmup)
            check_tflite(inspected, new_sig)
            replay = dict(inspected["warmup"] or {})
            if inspected.get("tflite"):
                replay["tflite"] = inspected["tflite"]["warmup"]
            published = publish_version(
                saved_model_dir, base_path, model_name, warmup, label, digest,
                keep_versions=config.keep_versions, target=target, serving_flags=serving_flags,
                batching_overrides=tuning.batching, server_base_path=server_base_path,
                lock_timeout_s=lock_timeout_s, tuning=tuning)
    except AlreadyPublished as e:
        return _identical(base_path, model_name, e.version, label, target, tuning,
                          server_base_path, lock_timeout_s)
    except PushRefused as e:
        return PushResult(False, None, None, str(e), {})
    version = published.version
    return PushResult(True, version, fs.join(base_path, model_name, str(version)),
                      f"pushed as version {version} ({label})",
                      {"warmup": {"records": count, **(replay or {})},
                       "removed_versions": published.removed, "configs": published.configs,
                       "labels": published.labels, "serving_config": tuning.record()})


def _identical(base_path: str, model_name: str, version: int, label: str, target: str,
               tuning: Tuning, server_base_path: str, lock_timeout_s: float) -> PushResult:
    """A rerun with nothing new (e.g. a re-blessed, unchanged model) adds no version,
    but records the deployment and rewrites the configs, so an earlier interrupted
    push is repaired and a re-measured model's tuning is served."""
    model_root = fs.join(base_path, model_name)
    with publisher_for(base_path).lock(model_root, lock_timeout_s):
        labels = update_state(model_root, _deployment(target, (), tuning)).labels
        write_configs(base_path, target, tuning.batching, server_base_path, tuning.session)
    return PushResult(True, version, fs.join(model_root, str(version)),
                      f"identical to version {version} already served as {label}; "
                      "no new version", {"labels": labels,
                                         "serving_config": tuning.record()})


def _deployment(target: str, serving_flags: Sequence[str], tuning: Optional[Tuning],
                batching: Optional[dict] = None):
    """The state change recording what the model is served with."""
    def change(state: State) -> None:
        # The flags stay recorded while any version may be served (a rollback to it).
        state.server_flags = sorted(set(state.server_flags)
                                    | (set(serving_flags) & set(SERVER_FLAGS)))
        state.target = target
        state.batching = tuning.batching if tuning else batching
        state.session = tuning.session.to_dict() if tuning else None
        state.tuning = tuning.record() if tuning else None
    return change


@dataclasses.dataclass
class Published:
    version: int
    removed: List[int]
    configs: Dict[str, str]
    labels: Dict[str, int]


def publish_version(saved_model_dir: str, base_path: str, model_name: str,
                    warmup_file: Optional[str] = None, label: Optional[str] = "stable",
                    digest: Optional[str] = None, keep_versions: int = DEFAULT_KEEP_VERSIONS,
                    target: str = "cpu", serving_flags: Sequence[str] = (),
                    batching_overrides: Optional[dict] = None,
                    server_base_path: str = SERVER_MOUNT,
                    lock_timeout_s: float = PusherConfig.LOCK_TIMEOUT_S,
                    tuning: Optional[Tuning] = None) -> Published:
    """The publishing half of a push, once every check passed: removes what dead
    pushes left, publishes the next version (atomic on disk, ordered and
    conditional on object stores), applies retention, records the deployment and
    rewrites the server configs. A kill at any point leaves no version a server
    would load half-written and no number reused. ``tuning`` (its batching and
    session) is recorded and served; without it ``batching_overrides`` over the
    target's defaults, on this host's cores."""
    if keep_versions < 1:
        raise PusherConfigError(f"keep_versions must be >= 1, got {keep_versions}.")
    model_root = fs.join(base_path, model_name)
    publisher = publisher_for(base_path)
    with publisher.lock(model_root, lock_timeout_s):
        publisher.clean_staging(model_root)
    version = publisher.publish(saved_model_dir, base_path, model_name, warmup_file, label,
                                digest, lock_timeout_s)
    with publisher.lock(model_root, lock_timeout_s):
        removed = publisher.apply_retention(model_root, keep_versions)
        labels = update_state(model_root, _deployment(target, serving_flags, tuning,
                                                      batching_overrides)).labels
        configs = write_configs(base_path, target, batching_overrides, server_base_path,
                                tuning.session if tuning else None)
    return Published(version, removed, configs, labels)


def _served_signature(version_dir: str) -> dict:
    """serving_default of a pushed version (read from a local copy on object stores)."""
    with publisher_for(version_dir).local_folder(version_dir) as local:
        return serving_signature(local)


def rollback(base_path: str, model_name: str, to_version: int,
             target: Optional[str] = None, server_base_path: str = SERVER_MOUNT) -> dict:
    """Moves the ``stable`` label to ``to_version`` and rewrites the configs.

    The deployment stays as the model was pushed for (target, batching, session
    threads, server flags) unless ``target`` says otherwise. A mistyped model name or base path
    writes nothing.
    """
    check_base_path(base_path)
    check_model_name(model_name)
    model_root = fs.join(base_path, model_name)
    if not versions(model_root):
        raise PusherConfigError(
            f"No pushed model {model_name!r} under {base_path} (no version folders in "
            f"{model_root}); check --base-path and --model-name. Nothing was changed.")
    state = State.load(model_root)
    target = target or state.target or "cpu"
    check_target(target)
    set_label(base_path, model_name, "stable", to_version)
    with publisher_for(base_path).lock(model_root):
        write_configs(base_path, target, state.batching, server_base_path,
                      Session.from_dict(state.session))
    return State.load(model_root).labels
