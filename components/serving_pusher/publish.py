"""Publishing versions; retention and labels.

On local disk (or a mounted volume) a version is staged in the model's folder,
fsynced, and renamed to its number under an flock; this module does that, and
is the one place in the pusher that uses local file calls (flock, fsync and
rename need them). On an object store the same steps are built from
conditional writes in :mod:`object_store`; :func:`publish`,
:func:`clean_stale_staging`, :func:`apply_retention` and :func:`push_lock`
pick the right one from the base path.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import time
import uuid
from typing import List, Optional

from tfx_bridge.components.serving_pusher import object_store
from tfx_bridge.components.serving_pusher.base_layout import (
    LABELS,
    LOCK_FILE,
    STAGING_PREFIX,
    WARMUP_DIR,
    WARMUP_FILE,
)
from tfx_bridge.components.serving_pusher.errors import (
    PusherConfigError,
    PushLocked,
    PushRefused,
)
from tfx_bridge.components.serving_pusher.state import (  # noqa: F401  (re-exported)
    State,
    update_state,
    versions,
)
from tfx_bridge.errors import resource_error
from tfx_bridge.runlock import open_lock_file, wait_for_flock
from tfx_bridge.storage import fs
from tfx_bridge.storage.names import child


def model_digest(saved_model_dir: str) -> str:
    """sha256 over every file's path and bytes (what decides "the same model")."""
    import hashlib

    h = hashlib.sha256()
    for root, dirs, files in os.walk(saved_model_dir, followlinks=True):  # as copied
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, saved_model_dir).encode() + b"\0")
            fs.hash_file(h, path)
    return h.hexdigest()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_model_root(model_root: str) -> None:
    """A model's folder in a local base path is a real folder, never a symlink: every
    lock, staging folder and version is written inside it, so a link would carry
    them out of the base path."""
    if os.path.islink(model_root):
        raise PusherConfigError(
            f"{model_root} is a symlink (-> {os.readlink(model_root)}): a model's folder "
            "in the base path must be a real folder, or versions and locks would be "
            "written where it points. Replace the link with a folder.")


@contextlib.contextmanager
def push_lock(model_root: str, timeout_s: float = 600.0):
    """An exclusive lock in the base path (flock: released if the holder dies).

    Object stores have no lock: there every shared write is conditional
    (:mod:`object_store`), so this holds nothing and writes nothing.
    """
    if fs.is_remote(model_root):
        yield
        return
    check_model_root(model_root)
    os.makedirs(model_root, exist_ok=True)
    fd = open_lock_file(os.path.join(model_root, LOCK_FILE))
    try:
        if not wait_for_flock(fd, timeout_s):
            raise PushLocked(
                f"Another push holds {model_root}/{LOCK_FILE} for over {timeout_s}s "
                "(a lock, not bad input): retry when it finishes.")
        yield
    finally:
        os.close(fd)


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
    try:
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
            fout.flush()
            os.fsync(fout.fileno())
    except OSError as e:  # a full or read-only disk is named, not an internal error
        named = resource_error(e, dst, "copying the model into", intact=True)
        if named is None:
            raise
        raise named from e


class AlreadyPublished(Exception):
    """The label's version already holds this digest: nothing to publish."""

    def __init__(self, version: int):
        super().__init__(f"version {version} holds this model")
        self.version = version


def publish(saved_model_dir: str, base_path: str, model_name: str,
            warmup_file: Optional[str] = None, label: Optional[str] = "stable",
            digest: Optional[str] = None, lock_timeout_s: float = 600.0) -> int:
    """Stages, fsyncs and renames into the next version; returns it. On an object
    store: :func:`object_store.publish`."""
    if fs.is_remote(base_path):
        return object_store.publish(saved_model_dir, base_path, model_name, warmup_file,
                                    label, digest)
    model_root = child(base_path, model_name)
    check_model_root(model_root)  # staging is written inside it, before the lock
    os.makedirs(model_root, exist_ok=True)
    staging = child(model_root, f"{STAGING_PREFIX}{_owner()}-{uuid.uuid4().hex}")
    try:
        _copy_tree_synced(saved_model_dir, staging)
        if warmup_file:
            os.makedirs(os.path.join(staging, WARMUP_DIR), exist_ok=True)
            _copy_synced(warmup_file, os.path.join(staging, WARMUP_DIR, WARMUP_FILE))
            _fsync_dir(os.path.join(staging, WARMUP_DIR))
            _fsync_dir(staging)
        with push_lock(model_root, lock_timeout_s):
            state = State.load(model_root)
            same = state.labels.get(label) if label is not None else None
            if digest is not None and same is not None and \
                    state.digests.get(str(same)) == digest and same in versions(model_root):
                # A concurrent push of the same model got here first (the caller's
                # check ran before the lock): one version, not two.
                raise AlreadyPublished(same)
            version = max([state.last_version, *versions(model_root)]) + 1
            # Issue the number first: a crash after this wastes a number, never reuses one.
            state.last_version = version
            state.save(model_root)
            os.rename(staging, child(model_root, str(version)))
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
    """Removes staging folders of pushes that died (call while holding the lock). On
    an object store: :func:`object_store.clean_stale` (old leftovers only: no lock
    tells a dead push from a live one there)."""
    if fs.is_remote(model_root):
        return object_store.clean_stale(fs.dirname(model_root), fs.basename(model_root))
    removed = []
    if not os.path.isdir(model_root):
        return removed
    for d in os.listdir(model_root):
        if d.startswith(STAGING_PREFIX) and not _owner_alive(model_root, d):
            shutil.rmtree(child(model_root, d), ignore_errors=True)
            removed.append(d)
    return removed


# A push stages outside the lock, so cleaning under it must spare live pushes' folders.
_OWNED = re.compile(re.escape(STAGING_PREFIX) + r"p(\d+)@(.+)-[0-9a-f]{32}")
_FOREIGN_STALE_S = 3600.0  # another host's staging folder: left alone this long


def _owner() -> str:
    return f"p{os.getpid()}@{socket.gethostname()}"


def _owner_alive(model_root: str, name: str) -> bool:
    """Whether the push that made staging folder ``name`` may still be copying into it:
    a live pid on this host, or another host's folder younger than an hour (a shared
    mount). Names without an owner are dead pushes' leftovers."""
    m = _OWNED.fullmatch(name)
    if not m:
        return False
    pid, host = int(m.group(1)), m.group(2)
    if host != socket.gethostname():
        try:
            age = time.time() - os.stat(child(model_root, name)).st_mtime
        except OSError:
            return False
        return age < _FOREIGN_STALE_S
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def apply_retention(model_root: str, keep: int) -> List[int]:
    """Keeps the newest ``keep`` versions and every labeled one; returns removed."""
    if keep < 1:
        raise PusherConfigError(f"keep_versions must be >= 1, got {keep}.")
    if fs.is_remote(model_root):
        return object_store.apply_retention(model_root, keep)
    state = State.load(model_root)
    labeled = set(state.labels.values())
    all_versions = versions(model_root)
    keep_set = set(all_versions[-keep:]) | labeled
    removed = [v for v in all_versions if v not in keep_set]
    for v in removed:
        # Rename away first, so Serving never sees a half-deleted integer folder.
        doomed = child(model_root, f"{STAGING_PREFIX}delete-{v}-{uuid.uuid4().hex}")
        os.rename(child(model_root, str(v)), doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return removed


def set_label(base_path: str, model_name: str, label: str, version: int) -> None:
    model_root = fs.join(base_path, model_name)
    if label not in LABELS:
        raise PusherConfigError(f"label {label!r}: use one of {LABELS}.")

    def move(state: State) -> None:
        present = versions(model_root)
        if version not in present or version in state.retired:
            raise PusherConfigError(
                f"{model_name} has no version {version} under {base_path}; versions: "
                f"{[v for v in present if v not in state.retired]}.")
        if not fs.isfile(fs.join(model_root, str(version), "saved_model.pb")):
            raise PushRefused(f"{model_root}/{version} is incomplete (no saved_model.pb).")
        state.labels[label] = version

    with push_lock(model_root):
        update_state(model_root, move)
