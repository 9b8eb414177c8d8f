"""The object-store publisher: a base path on ``s3://``, with no flock and no rename.

What a lock and an atomic rename give on disk is built here from conditional
writes and ordering, each of which holds under any number of concurrent
pushers and a kill at any moment:

- **Version numbers.** A push takes number N by creating ``<name>/.versions/N``
  only if absent (S3 ``If-None-Match: *``): exactly one pusher gets each
  number. Markers are never deleted, so a number is never reused, not even
  after its version was removed or its push died.
- **Upload.** The SavedModel (with its warmup requests) is uploaded to
  ``<base>/.staging/<name>/<time>-<id>/``, outside the model's folder, where TF
  Serving never looks. Only then is a number taken and the files copied,
  server-side, into ``<name>/N/`` with ``saved_model.pb`` last.
- **Completeness.** A version exists (:meth:`ObjectStorePublisher.versions`) once its
  ``saved_model.pb`` does; models.config, written after the copy, names only
  such versions, and TF Serving loads only the versions models.config names.
- **State and configs.** ``.state.json`` and the server files are rewritten
  only if unchanged since read (``If-Match``); a push that lost the race
  re-reads and re-applies its change (:func:`conditional_update`).
- **Retention** marks a version retired in the state (only if unlabeled, in
  the same conditional write), then deletes its ``saved_model.pb`` (so it
  stops counting), then the rest; a rollback refuses a retired version.
- **Dead pushes** leave a staging folder or a version folder without
  ``saved_model.pb``; a later push removes them once older than
  :data:`STALE_AFTER_S`.

The storage calls (conditional create and write, server-side copy) are
generic and live in :mod:`tfx_bridge.storage.fs` and :mod:`tfx_bridge.storage.s3`;
:mod:`tfx_bridge.storage.objectstore` holds the AWS variables this module's
server volume reads. No TFX imports; every call goes through
:mod:`tfx_bridge.storage.fs`.
"""
from __future__ import annotations

import contextlib
import json
import random
import time
import uuid
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from tfx_bridge import limits
from tfx_bridge.components.serving_pusher.base_layout import (
    STATE_FILE,
    WARMUP_DIR,
    WARMUP_FILE,
)
from tfx_bridge.components.serving_pusher.errors import PusherError, PushLocked, PushRefused
from tfx_bridge.components.serving_pusher.state import State, integer_folders
from tfx_bridge.storage import fs
from tfx_bridge.storage.names import child

STAGING_ROOT = ".staging"
MARKERS = ".versions"
# A staging folder or unfinished version older than this belongs to a push that died
# (an upload taking longer is not expected; a live one would only lose its leftovers).
STALE_AFTER_S = 6 * 3600
# Conditional writes retried this often before a push gives up as busy (exit 4):
# each retry means another push wrote in between, so this is heavy contention.
UPDATE_ATTEMPTS = 100


def conditional_update(path: str, make: Callable[[Optional[bytes]], bytes]) -> bytes:
    """Writes ``make(current bytes or None)`` to an object-store ``path`` only if the
    object is still what was read; on a lost race re-reads and calls ``make`` again,
    so the last write of concurrent callers is computed after all earlier ones."""
    for attempt in range(UPDATE_ATTEMPTS):
        old, tag = fs.read_tagged(path)
        new = make(old)
        if new == old or fs.write_if(path, new, tag):
            return new
        # Jittered backoff: concurrent pushers retrying in lockstep would collide again.
        time.sleep(random.uniform(0, min(1.0, 0.01 * 2 ** min(attempt, 7))))
    raise PushLocked(f"{path} was changed by other pushes {UPDATE_ATTEMPTS} times while this "
                     "push tried to update it (contention, not bad input): retry later.")


def _versions(model_root: str) -> List[int]:
    # A folder is a key prefix that exists as soon as its first file does, and
    # saved_model.pb is copied last: a version counts once that file is there.
    return sorted(int(d) for d in integer_folders(model_root)
                  if fs.isfile(fs.join(model_root, d, "saved_model.pb")))


def _update_state(model_root: str, change: Callable[[State], None]) -> State:
    def make(old: Optional[bytes]) -> bytes:
        state = State.parse(old, model_root)
        change(state)
        return state.dumps()

    return State.parse(conditional_update(fs.join(model_root, STATE_FILE), make), model_root)


def _taken(model_root: str, state: State) -> int:
    """The highest number any push has used: state, version folders (complete or
    not) and markers."""
    names = fs.listdir(model_root) if fs.isdir(model_root) else []
    markers = child(model_root, MARKERS)
    marked = fs.listdir(markers) if fs.isdir(markers) else []
    numbers = [int(n) for n in names + marked if n.isdigit()]
    return max([state.last_version, *numbers])


def allocate_version(model_root: str) -> int:
    """The next free version number, taken for good by a conditional create."""
    number = _taken(model_root, State.load(model_root)) + 1
    stamp = json.dumps({"created": time.time()}).encode()
    while not fs.create_if_absent(child(model_root, MARKERS, str(number)), stamp):
        number += 1  # another push took it between the listing and the create
    return number


def _publish(saved_model_dir: str, base_path: str, model_name: str,
             warmup_file: Optional[str], label: Optional[str], digest: Optional[str]) -> int:
    """Uploads a local SavedModel to staging, takes a number, copies it into
    ``<name>/<N>/`` (saved_model.pb last), records the state; returns N."""
    if not fs.isfile(fs.join(saved_model_dir, "saved_model.pb")):
        raise PushRefused(f"{saved_model_dir} has no saved_model.pb.")
    model_root = child(base_path, model_name)
    staging = child(base_path, STAGING_ROOT, model_name,
                    f"{int(time.time())}-{uuid.uuid4().hex}")
    try:
        fs.copy_tree(saved_model_dir, staging)
        if warmup_file:
            fs.copy(warmup_file, fs.join(staging, WARMUP_DIR, WARMUP_FILE))
        version = allocate_version(model_root)
        fs.copy_tree(staging, child(model_root, str(version)),
                     last=("saved_model.pb",))

        def record(state: State) -> None:
            state.last_version = max(state.last_version, version)
            if digest is not None:
                state.digests[str(version)] = digest
            if label is not None:
                state.labels[label] = version
                state.labels.setdefault("stable", version)

        _update_state(model_root, record)
    finally:
        fs.remove(staging)
    return version


def clean_stale(base_path: str, model_name: str, now: Optional[float] = None) -> List[str]:
    """Removes what pushes that died left: staging folders and version folders
    without saved_model.pb, once older than STALE_AFTER_S. Returns their paths."""
    now = time.time() if now is None else now
    removed = []
    staging_root = child(base_path, STAGING_ROOT, model_name)
    for name in fs.listdir(staging_root) if fs.isdir(staging_root) else []:
        started = name.split("-", 1)[0]
        if started.isdigit() and now - int(started) > STALE_AFTER_S:
            path = child(staging_root, name)
            fs.remove(path)
            removed.append(path)
    model_root = child(base_path, model_name)
    complete = set(_versions(model_root))
    for name in fs.listdir(model_root) if fs.isdir(model_root) else []:
        if not name.isdigit() or int(name) in complete:
            continue
        marker = child(model_root, MARKERS, name)
        try:
            created = float(limits.read_json(marker, PusherError, "")["created"])
        except Exception:  # noqa: BLE001  (no or unreadable marker: not ours to remove)
            continue
        if now - created > STALE_AFTER_S:
            path = child(model_root, name)
            fs.remove(path)
            removed.append(path)
    return removed


def _apply_retention(model_root: str, keep: int) -> List[int]:
    present = _versions(model_root)
    doomed: List[int] = []

    def retire(state: State) -> None:
        keep_set = set(present[-keep:]) | set(state.labels.values())
        doomed[:] = sorted({v for v in present if v not in keep_set}
                           | {v for v in state.retired if v in present})
        state.retired = sorted(set(state.retired) | set(doomed))

    _update_state(model_root, retire)
    for v in doomed:
        folder = child(model_root, str(v))
        fs.remove(fs.join(folder, "saved_model.pb"))  # first: the version stops counting
        fs.remove(folder)
    return doomed


class ObjectStorePublisher:
    """:class:`~.publisher.Publisher` on an object store (``s3://``)."""

    def check_base_path(self, base_path: str) -> None:
        fs.isdir(base_path)  # the bucket and the credentials, before any work

    def check_model_root(self, model_root: str) -> None:
        pass  # no links on an object store: a key is where it says

    @contextlib.contextmanager
    def lock(self, root: str, timeout_s: float = 0.0) -> Iterator[None]:
        # No lock: every shared write here is conditional, so this holds nothing.
        yield

    def publish(self, saved_model_dir: str, base_path: str, model_name: str,
                warmup_file: Optional[str] = None, label: Optional[str] = "stable",
                digest: Optional[str] = None, lock_timeout_s: float = 0.0) -> int:
        return _publish(saved_model_dir, base_path, model_name, warmup_file, label, digest)

    def versions(self, model_root: str) -> List[int]:
        return _versions(model_root)

    def update_state(self, model_root: str, change: Callable[[State], None]) -> State:
        return _update_state(model_root, change)

    def write_files(self, base_path: str, makers: Mapping[str, Callable[[], str]]
                    ) -> Dict[str, str]:
        paths = {name: fs.join(base_path, name) for name in makers}
        for name, make in makers.items():
            conditional_update(paths[name], lambda _old, make=make: make().encode())
        return paths

    def clean_staging(self, model_root: str) -> List[str]:
        """Old leftovers only: no lock tells a dead push from a live one here."""
        return clean_stale(fs.dirname(model_root), fs.basename(model_root))

    def apply_retention(self, model_root: str, keep: int) -> List[int]:
        return _apply_retention(model_root, keep)

    def server_volume(self, base_path: str, app: str) -> Tuple[dict, List[dict]]:
        """Mounted read-only by the Mountpoint for Amazon S3 CSI driver (a
        PersistentVolume and its claim): stock TF Serving images since 2.7 cannot
        read s3:// themselves (tensorflow/serving#1963)."""
        from tfx_bridge.storage import objectstore, s3

        bucket, prefix = s3.split(base_path)
        options = ["allow-other"]
        if prefix.strip("/"):
            options.append(f"prefix {prefix.strip('/')}/")
        if objectstore.region():
            options.append(f"region {objectstore.region()}")
        if objectstore.endpoint_url():
            options += [f"endpoint-url {objectstore.endpoint_url()}", "force-path-style"]
        claim = f"{app}-models"
        volume = {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": claim},
            "spec": {"capacity": {"storage": "1Gi"},  # required by the API, unused by the driver
                     "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                     "claimRef": {"name": claim, "namespace": "default"},
                     "mountOptions": options,
                     "csi": {"driver": "s3.csi.aws.com", "volumeHandle": claim,
                             "volumeAttributes": {"bucketName": bucket}}}}
        pvc = {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "",
                     "resources": {"requests": {"storage": "1Gi"}}, "volumeName": claim}}
        return ({"persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
                [volume, pvc])

    @contextlib.contextmanager
    def local_folder(self, folder: str) -> Iterator[str]:
        with fs.staged_locally(folder, prefix="tfx-bridge-served-") as (local,):
            yield local
