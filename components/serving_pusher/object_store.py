"""Publishing to a base path on an object store (``s3://``): no flock, no rename.

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
- **Completeness.** A version exists (:func:`state.versions`) once its
  ``saved_model.pb`` does; models.config, written after the copy, names only
  such versions, and TF Serving loads only the versions models.config names.
- **State and configs.** ``.state.json`` and the server files are rewritten
  only if unchanged since read (``If-Match``); a push that lost the race
  re-reads and re-applies its change (:func:`state.conditional_update`).
- **Retention** marks a version retired in the state (only if unlabeled, in
  the same conditional write), then deletes its ``saved_model.pb`` (so it
  stops counting), then the rest; a rollback refuses a retired version.
- **Dead pushes** leave a staging folder or a version folder without
  ``saved_model.pb``; a later push removes them once older than
  :data:`STALE_AFTER_S`.

No TFX imports; every call goes through :mod:`tfx_bridge.storage.fs`.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import List, Optional

from tfx_bridge.components.serving_pusher.base_layout import WARMUP_DIR, WARMUP_FILE
from tfx_bridge.components.serving_pusher.errors import PushRefused
from tfx_bridge.components.serving_pusher.state import State, update_state, versions
from tfx_bridge.storage import fs
from tfx_bridge.storage.names import child

STAGING_ROOT = ".staging"
MARKERS = ".versions"
# A staging folder or unfinished version older than this belongs to a push that died
# (an upload taking longer is not expected; a live one would only lose its leftovers).
STALE_AFTER_S = 6 * 3600


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


def publish(saved_model_dir: str, base_path: str, model_name: str,
            warmup_file: Optional[str] = None, label: Optional[str] = "stable",
            digest: Optional[str] = None) -> int:
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

        update_state(model_root, record)
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
    complete = set(versions(model_root))
    for name in fs.listdir(model_root) if fs.isdir(model_root) else []:
        if not name.isdigit() or int(name) in complete:
            continue
        marker = child(model_root, MARKERS, name)
        try:
            created = float(json.loads(fs.read_text(marker))["created"])
        except Exception:  # noqa: BLE001  (no or unreadable marker: not ours to remove)
            continue
        if now - created > STALE_AFTER_S:
            path = child(model_root, name)
            fs.remove(path)
            removed.append(path)
    return removed


def apply_retention(model_root: str, keep: int) -> List[int]:
    """Keeps the newest ``keep`` versions and every labeled one; returns removed."""
    present = versions(model_root)
    doomed: List[int] = []

    def retire(state: State) -> None:
        keep_set = set(present[-keep:]) | set(state.labels.values())
        doomed[:] = sorted({v for v in present if v not in keep_set}
                           | {v for v in state.retired if v in present})
        state.retired = sorted(set(state.retired) | set(doomed))

    update_state(model_root, retire)
    for v in doomed:
        folder = child(model_root, str(v))
        fs.remove(fs.join(folder, "saved_model.pb"))  # first: the version stops counting
        fs.remove(folder)
    return doomed
