"""A model's push state under the base path, which of its versions exist, and labels.

The state is read, changed and written through the base path's publisher
(:mod:`publisher`): under a lock on disk, by conditional writes on an object
store. Goes through :mod:`tfx_bridge.storage.fs` only. No TFX imports.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Callable, Dict, List, Optional

from tfx_bridge import limits
from tfx_bridge.components.serving_pusher.base_layout import LABELS, STATE_FILE, TARGETS
from tfx_bridge.components.serving_pusher.errors import PusherConfigError, PushRefused
from tfx_bridge.components.serving_pusher.publisher import publisher_for
from tfx_bridge.storage import fs


def versions(model_root: str) -> List[int]:
    """Integer-named version folders TF Serving may load, ascending (complete ones:
    the publisher of the base path knows when a folder is)."""
    return publisher_for(model_root).versions(model_root)


def integer_folders(model_root: str) -> List[str]:
    """The integer names under a model's folder (TF Serving ignores the others)."""
    if not fs.isdir(model_root):
        return []
    return [d for d in fs.listdir(model_root) if d.isdigit()]


@dataclasses.dataclass
class State:
    """Per model: labels -> version, the highest version ever issued, content digests,
    and the TF Serving flags its versions need (the manifest is written from these)."""

    labels: Dict[str, int] = dataclasses.field(default_factory=dict)
    last_version: int = 0
    digests: Dict[str, str] = dataclasses.field(default_factory=dict)
    server_flags: List[str] = dataclasses.field(default_factory=list)
    # The deployment the model was last pushed for: a rollback keeps it. ``batching``
    # holds every BatchingParameters value written, ``session`` the server's thread
    # pools (tuning.Session), ``tuning`` where each value came from (tuning.Tuning.record).
    target: Optional[str] = None
    batching: Optional[dict] = None
    # Versions retention is removing (object stores, where removal is not one step):
    # never labeled again, and removed again by the next push if a removal died.
    retired: List[int] = dataclasses.field(default_factory=list)
    session: Optional[dict] = None
    tuning: Optional[dict] = None

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
                        sorted(int(v) for v in doc.get("retired", [])),
                        doc.get("session"), doc.get("tuning"))
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
                           "retired": self.retired, "session": self.session,
                           "tuning": self.tuning}, indent=2, sort_keys=True).encode()


def update_state(model_root: str, change: Callable[[State], None]) -> State:
    """Reads the model's state, applies ``change`` (which may raise to refuse) and
    writes it, as one step: on disk the caller holds the push lock; on an object
    store ``change`` is re-applied to a newer state when another push wrote in
    between (so it must depend only on the state given)."""
    return publisher_for(model_root).update_state(model_root, change)


def set_label(base_path: str, model_name: str, label: str, version: int) -> None:
    """Moves ``label`` to a complete, not retired ``version``."""
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

    publisher = publisher_for(model_root)
    with publisher.lock(model_root):
        publisher.update_state(model_root, move)
