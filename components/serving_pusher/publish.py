"""The local-disk publisher: a base path on local disk or a mounted volume.

A version is staged in the model's folder, fsynced, and renamed to its number
under an flock, so it appears complete or not at all; retention renames a
version away before deleting it. The one place in the pusher that uses local
file calls (flock, fsync and rename need them). The object-store publisher is
:mod:`object_store_publisher`; :func:`publisher.publisher_for` picks one.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import time
import uuid
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from tfx_bridge.components.serving_pusher.base_layout import (
    LOCK_FILE,
    STAGING_PREFIX,
    STATE_FILE,
    WARMUP_DIR,
    WARMUP_FILE,
)
from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.errors import (
    PusherConfigError,
    PushLocked,
    PushRefused,
)
from tfx_bridge.components.serving_pusher.state import State, integer_folders
from tfx_bridge.errors import resource_error
from tfx_bridge.runlock import open_folder, open_lock_file, wait_for_flock
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
def push_lock(model_root: str, timeout_s: float = PusherConfig.LOCK_TIMEOUT_S):
    """An exclusive lock in a local base path or model folder (flock: released if
    the holder dies)."""
    check_model_root(model_root)
    os.makedirs(model_root, exist_ok=True)
    # Opened through the folder's own descriptor, taken without following a link:
    # a link swapped in after the check above cannot carry the lock elsewhere.
    folder = open_folder(model_root)
    try:
        fd = open_lock_file(LOCK_FILE, dir_fd=folder)
    finally:
        os.close(folder)
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


def _publish(saved_model_dir: str, base_path: str, model_name: str,
             warmup_file: Optional[str], label: Optional[str], digest: Optional[str],
             lock_timeout_s: float) -> int:
    """Stages, fsyncs and renames into the next version; returns it."""
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
                    state.digests.get(str(same)) == digest and same in _versions(model_root):
                # A concurrent push of the same model got here first (the caller's
                # check ran before the lock): one version, not two.
                raise AlreadyPublished(same)
            version = max([state.last_version, *_versions(model_root)]) + 1
            # Issue the number first: a crash after this wastes a number, never reuses one.
            state.last_version = version
            _save_state(model_root, state)
            os.rename(staging, child(model_root, str(version)))
            _fsync_dir(model_root)
            if digest is not None:
                state.digests[str(version)] = digest
            if label is not None:
                state.labels[label] = version
                if "stable" not in state.labels:
                    state.labels["stable"] = version
            _save_state(model_root, state)
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


def _apply_retention(model_root: str, keep: int) -> List[int]:
    state = State.load(model_root)
    labeled = set(state.labels.values())
    all_versions = _versions(model_root)
    keep_set = set(all_versions[-keep:]) | labeled
    removed = [v for v in all_versions if v not in keep_set]
    for v in removed:
        # Rename away first, so Serving never sees a half-deleted integer folder.
        doomed = child(model_root, f"{STAGING_PREFIX}delete-{v}-{uuid.uuid4().hex}")
        os.rename(child(model_root, str(v)), doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return removed


def _versions(model_root: str) -> List[int]:
    # A version folder appears by an atomic rename, complete.
    return sorted(int(d) for d in integer_folders(model_root)
                  if os.path.isdir(child(model_root, d)))


def _save_state(model_root: str, state: State) -> None:
    fs.write_bytes(fs.join(model_root, STATE_FILE), state.dumps(), sync=True)


class LocalDiskPublisher:
    """:class:`~.publisher.Publisher` on local disk or a mounted volume."""

    def check_base_path(self, base_path: str) -> None:
        pass  # a local folder needs no credentials; the model folder is checked below

    def check_model_root(self, model_root: str) -> None:
        check_model_root(model_root)

    def lock(self, root: str, timeout_s: float = PusherConfig.LOCK_TIMEOUT_S):
        return push_lock(root, timeout_s)

    def publish(self, saved_model_dir: str, base_path: str, model_name: str,
                warmup_file: Optional[str] = None, label: Optional[str] = "stable",
                digest: Optional[str] = None,
                lock_timeout_s: float = PusherConfig.LOCK_TIMEOUT_S) -> int:
        return _publish(saved_model_dir, base_path, model_name, warmup_file, label, digest,
                        lock_timeout_s)

    def versions(self, model_root: str) -> List[int]:
        return _versions(model_root)

    def update_state(self, model_root: str, change: Callable[[State], None]) -> State:
        """The caller holds the model's lock."""
        state = State.load(model_root)
        change(state)
        _save_state(model_root, state)
        return state

    def write_files(self, base_path: str, makers: Mapping[str, Callable[[], str]]
                    ) -> Dict[str, str]:
        paths = {name: fs.join(base_path, name) for name in makers}
        with push_lock(base_path):
            for name, make in makers.items():
                fs.write_text(paths[name], make(), sync=True)
        return paths

    def clean_staging(self, model_root: str) -> List[str]:
        return clean_stale_staging(model_root)

    def apply_retention(self, model_root: str, keep: int) -> List[int]:
        return _apply_retention(model_root, keep)

    def server_volume(self, base_path: str, app: str) -> Tuple[dict, List[dict]]:
        return {"hostPath": {"path": os.path.abspath(base_path)}}, []

    @contextlib.contextmanager
    def local_folder(self, folder: str) -> Iterator[str]:
        yield folder
