"""A model's push state under the base path, and which of its versions exist.

Shared by the local-disk publisher (which changes the state under its flock)
and the object-store one (which changes it by conditional writes: an update is
written only if nobody wrote since it was read, else re-read and re-applied).
Goes through :mod:`tfx_bridge.storage.fs` only. No TFX imports.
"""
from __future__ import annotations

import dataclasses
import json
import random
import time
from typing import Callable, Dict, List, Optional

from tfx_bridge import limits
from tfx_bridge.components.serving_pusher.base_layout import LABELS, STATE_FILE, TARGETS
from tfx_bridge.components.serving_pusher.errors import PusherConfigError, PushLocked
from tfx_bridge.storage import fs

# Conditional writes retried this often before a push gives up as busy (exit 4):
# each retry means another push wrote in between, so this is heavy contention.
UPDATE_ATTEMPTS = 100


def versions(model_root: str) -> List[int]:
    """Integer-named version folders TF Serving may load, ascending.

    On object stores a folder is a key prefix that exists as soon as its first
    file does, and the publisher copies ``saved_model.pb`` last: there a version
    counts only once its ``saved_model.pb`` is there. On disk a version folder
    appears by an atomic rename, complete.
    """
    if not fs.isdir(model_root):
        return []
    names = [d for d in fs.listdir(model_root) if d.isdigit()]
    if fs.is_remote(model_root):
        return sorted(int(d) for d in names
                      if fs.isfile(fs.join(model_root, d, "saved_model.pb")))
    return sorted(int(d) for d in names if fs.isdir(fs.join(model_root, d)))


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
    # Versions retention is removing (object stores, where removal is not one step):
    # never labeled again, and removed again by the next push if a removal died.
    retired: List[int] = dataclasses.field(default_factory=list)

    @classmethod
    def parse(cls, data: Optional[bytes], model_root: str) -> State:
        """The state in ``data`` (None: no state yet), validated against the version
        folders: a corrupt or inconsistent file stops the caller before anything is
        published (PusherConfigError naming the file and the repair)."""
        if data is None:
            return cls()
        path = fs.join(model_root, STATE_FILE)
        repair = (f"Repair or remove {path} (it is rebuilt from the version folders when "
                  "absent; labels are then set again by the next push or a rollback).")
        try:
            doc = limits.loads_json(data, str(path))
            state = cls({str(k): int(v) for k, v in doc.get("labels", {}).items()},
                        int(doc.get("last_version", 0)),
                        {str(k): str(v) for k, v in doc.get("digests", {}).items()},
                        sorted(str(f) for f in doc.get("server_flags", [])),
                        doc.get("target"), doc.get("batching"),
                        sorted(int(v) for v in doc.get("retired", [])))
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

    @classmethod
    def load(cls, model_root: str) -> State:
        path = fs.join(model_root, STATE_FILE)
        return cls.parse(fs.read_bytes(path, nofollow=True) if fs.isfile(path) else None,
                         model_root)

    def dumps(self) -> bytes:
        return json.dumps({"labels": self.labels, "last_version": self.last_version,
                           "digests": self.digests, "server_flags": self.server_flags,
                           "target": self.target, "batching": self.batching,
                           "retired": self.retired}, indent=2, sort_keys=True).encode()

    def save(self, model_root: str) -> None:
        """Local disk only, under the push lock (object stores: :func:`update_state`)."""
        fs.write_bytes(fs.join(model_root, STATE_FILE), self.dumps(), sync=True)


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


def update_state(model_root: str, change: Callable[[State], None]) -> State:
    """Reads the model's state, applies ``change`` (which may raise to refuse) and
    writes it, as one step: on disk the caller holds the push lock; on an object
    store the write is conditional and ``change`` is re-applied to a newer state
    when another push wrote in between (so it must depend only on the state given)."""
    if not fs.is_remote(model_root):
        state = State.load(model_root)
        change(state)
        state.save(model_root)
        return state

    def make(old: Optional[bytes]) -> bytes:
        state = State.parse(old, model_root)
        change(state)
        return state.dumps()

    return State.parse(conditional_update(fs.join(model_root, STATE_FILE), make), model_root)
