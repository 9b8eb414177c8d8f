"""One publisher per storage kind of the serving base path, chosen once from the path.

A publisher does everything a push, a rollback or a config rewrite needs from
the storage under the base path: lock, publish a version, list versions,
read and write a model's state, write the server files, clean what dead
pushes left, apply retention, and say how the server mounts the base path.
Two kinds:

- local disk or a mounted volume: :class:`~.publish.LocalDiskPublisher`
  (flock, fsync, atomic rename);
- ``s3://``: :class:`~.object_store_publisher.ObjectStorePublisher` (no lock,
  no rename: conditional writes, version markers, staging outside the model).

:func:`publisher_for` is the one place that tells them apart; the callers
(``serving``, ``state``, ``server_config``, ``config``) never ask which kind.
No TFX imports.

Example:
    >>> type(publisher_for("/serving/models")).__name__
    'LocalDiskPublisher'
    >>> type(publisher_for("s3://bucket/serving")).__name__
    'ObjectStorePublisher'
    >>> publisher_kind("gs://bucket/serving") is None  # no conditional writes there
    True
"""
from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Callable,
    ContextManager,
    Dict,
    List,
    Mapping,
    Optional,
    Protocol,
    Tuple,
)

from tfx_bridge.storage import fs

if TYPE_CHECKING:
    from tfx_bridge.components.serving_pusher.state import State

LOCAL = "local"
OBJECT_STORE = "object store"


class Publisher(Protocol):
    def check_base_path(self, base_path: str) -> None:
        """Refuses a base path this kind cannot use (bucket, credentials)."""

    def check_model_root(self, model_root: str) -> None:
        """Refuses a model folder writes inside it would escape (a symlink on disk)."""

    def lock(self, root: str, timeout_s: float = ...) -> ContextManager[None]:
        """Serializes writers of ``root`` (a model folder or the base path)."""

    def publish(self, saved_model_dir: str, base_path: str, model_name: str,
                warmup_file: Optional[str], label: Optional[str], digest: Optional[str],
                lock_timeout_s: float) -> int:
        """Publishes the next version of a local SavedModel (with its warmup file),
        recording ``digest`` and moving ``label`` to it; returns its number."""

    def versions(self, model_root: str) -> List[int]:
        """The complete versions a server may load, ascending."""

    def update_state(self, model_root: str, change: Callable[[State], None]) -> State:
        """Reads the model's state, applies ``change`` and writes it, as one step."""

    def write_files(self, base_path: str, makers: Mapping[str, Callable[[], str]]
                    ) -> Dict[str, str]:
        """Writes each named server file under the base path, its text computed by
        its maker at the time it is written; returns the paths."""

    def clean_staging(self, model_root: str) -> List[str]:
        """Removes what dead pushes left; returns what was removed."""

    def apply_retention(self, model_root: str, keep: int) -> List[int]:
        """Keeps the newest ``keep`` versions and every labeled one; returns removed."""

    def server_volume(self, base_path: str, app: str) -> Tuple[dict, List[dict]]:
        """The server pod's volume source for the base path, and the objects it needs."""

    def local_folder(self, folder: str) -> ContextManager[str]:
        """A pushed folder as a local path for readers of local files."""


def publisher_kind(base_path: str) -> Optional[str]:
    """The storage kind a base path is published on; None when there is none for its
    scheme (publishing on an object store needs conditional writes, which
    :mod:`tfx_bridge.storage.fs` has for s3 only)."""
    if not fs.is_remote(base_path):
        return LOCAL
    return OBJECT_STORE if base_path.startswith("s3://") else None


def publisher_for(base_path: str) -> Publisher:
    """The publisher for ``base_path`` (or any path under it)."""
    # Imported here: both publishers build on the state module, which uses this one.
    kind = publisher_kind(base_path)
    if kind == LOCAL:
        from tfx_bridge.components.serving_pusher.publish import LocalDiskPublisher

        return LocalDiskPublisher()
    if kind == OBJECT_STORE:
        from tfx_bridge.components.serving_pusher.object_store_publisher import (
            ObjectStorePublisher,
        )

        return ObjectStorePublisher()
    raise ValueError(f"No publisher for {base_path}: config.base_path_problem refuses it.")
