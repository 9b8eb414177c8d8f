"""Publishing versions: staged, fsynced, renamed under a lock; state, retention, labels.
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
from typing import Dict, List, Optional

from tfx_bridge.components.serving_pusher.base_layout import (
    LABELS,
    LOCK_FILE,
    STAGING_PREFIX,
    STATE_FILE,
    TARGETS,
    WARMUP_DIR,
    WARMUP_FILE,
)
from tfx_bridge.components.serving_pusher.errors import (
    PusherConfigError,
    PushLocked,
    PushRefused,
)
from tfx_bridge.names import child

# --------------------------------------------------------------------------- publish


@dataclasses.dataclass
class State:
    """Per model: labels -> version, the highest version ever issued, content digests,
    and the TF Serving flags its versions need (the manifest is written from these)."""

    labels: Dict[str, int] = dataclasses.field(default_factory=dict)
    last_version: int = 0
    digests: Dict[str, str] = dataclasses.field(default_factory=dict)
    server_flags: List[str] = dataclasses.field(default_factory=list)
    # The deployment the model was last pushed for: a rollback keeps it.
    target: Optional[str] = None
    batching: Optional[dict] = None

    @classmethod
    def load(cls, model_root: str) -> State:
        """The model's state, validated: a corrupt or inconsistent file stops the caller
        before anything is published (PusherConfigError naming the file and the repair)."""
        path = os.path.join(model_root, STATE_FILE)
        if not os.path.exists(path):
            return cls()
        repair = (f"Repair or remove {path} (it is rebuilt from the version folders when "
                  "absent; labels are then set again by the next push or a rollback).")
        try:
            with open(path) as f:
                doc = json.load(f)
            state = cls({str(k): int(v) for k, v in doc.get("labels", {}).items()},
                        int(doc.get("last_version", 0)),
                        {str(k): str(v) for k, v in doc.get("digests", {}).items()},
                        sorted(str(f) for f in doc.get("server_flags", [])),
                        doc.get("target"), doc.get("batching"))
        except (ValueError, TypeError, AttributeError) as e:
            raise PusherConfigError(f"{path} is not a valid push state ({e}). {repair}") from e
        present = set(versions(model_root))
        missing = {k: v for k, v in state.labels.items() if v not in present}
        unknown = sorted(set(state.labels) - set(LABELS))
        if missing or unknown or (state.target not in (None, *TARGETS)):
            raise PusherConfigError(
                f"{path} is inconsistent: " + "; ".join(
                    [f"label {k!r} names version {v}, which is not under {model_root}"
                     for k, v in sorted(missing.items())]
                    + [f"unknown label {k!r}" for k in unknown]
                    + ([f"unknown target {state.target!r}"]
                       if state.target not in (None, *TARGETS) else []))
                + f". {repair}")
        return state

    def save(self, model_root: str) -> None:
        atomic_write(os.path.join(model_root, STATE_FILE),
                     json.dumps({"labels": self.labels, "last_version": self.last_version,
                                 "digests": self.digests, "server_flags": self.server_flags,
                                 "target": self.target, "batching": self.batching},
                                indent=2, sort_keys=True))


def model_digest(saved_model_dir: str) -> str:
    """sha256 over every file's path and bytes (what decides "the same model")."""
    import hashlib

    h = hashlib.sha256()
    for root, dirs, files in os.walk(saved_model_dir, followlinks=True):  # as copied
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


def atomic_write(path: str, text: str) -> None:
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
    """Copies a SavedModel, saved_model.pb last, fsyncing every file and folder.

    In-folder symlinks are followed (copied as what they point to, as the load
    check saw them); push() has refused any that lead outside or loop.
    """
    last = None
    for root, _dirs, files in os.walk(src, followlinks=True):
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
    model_root = child(base_path, model_name, error=PusherConfigError)
    os.makedirs(model_root, exist_ok=True)
    staging = child(model_root, f"{STAGING_PREFIX}{uuid.uuid4().hex}", error=PusherConfigError)
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
            os.rename(staging, child(model_root, str(version), error=PusherConfigError))
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


def clean_stale_staging(model_root: str) -> List[str]:
    """Removes staging folders of pushes that died (call while holding the lock)."""
    removed = []
    if not os.path.isdir(model_root):
        return removed
    for d in os.listdir(model_root):
        if d.startswith(STAGING_PREFIX):
            shutil.rmtree(child(model_root, d, error=PusherConfigError), ignore_errors=True)
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
        doomed = child(model_root, f"{STAGING_PREFIX}delete-{v}-{uuid.uuid4().hex}",
                       error=PusherConfigError)
        os.rename(child(model_root, str(v), error=PusherConfigError), doomed)
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


