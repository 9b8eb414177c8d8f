"""What a local run reads from and writes to MLMD about runs themselves: executions a
killed run left RUNNING, and progress lines as components start and end.

Both assume the workdir's run lock (tfx_bridge.runlock) is held: with no other
run on this MLMD store, an execution still RUNNING belongs to a run that died.

Example:
    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     mark_abandoned(os.path.join(d, "metadata.sqlite"))
    []
"""
from __future__ import annotations

import datetime
import threading
import time
from typing import Callable, Dict, List, Optional

from tfx_bridge.storage import fs

ABANDONED_PROPERTY = "tfx_bridge_abandoned"


def _store(metadata_path: str, read_only: bool = False):
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2
    from tfx.orchestration import metadata as tfx_metadata

    config = tfx_metadata.sqlite_metadata_connection_config(metadata_path)
    if read_only:  # the watcher never writes, nor creates a schema the run is creating
        config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return metadata_store.MetadataStore(config)


def _type_names(store) -> Dict[int, str]:
    return {t.id: t.name.rsplit(".", 1)[-1] for t in store.get_execution_types()}


def mark_abandoned(metadata_path: str) -> List[str]:
    """Marks executions left RUNNING (their run was killed) FAILED, with the
    ``tfx_bridge_abandoned`` property saying why, and removes their output folders
    that hold no file. Returns one line per execution marked. Call it holding the
    workdir's run lock, before the run starts."""
    from ml_metadata.proto import metadata_store_pb2

    if not fs.isfile(metadata_path):
        return []
    store = _store(metadata_path)
    running = [e for e in store.get_executions()
               if e.last_known_state == metadata_store_pb2.Execution.RUNNING]
    if not running:
        return []
    names = _type_names(store)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    outputs = {metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.PENDING_OUTPUT}
    events = store.get_events_by_execution_ids([e.id for e in running])
    artifact_ids = sorted({ev.artifact_id for ev in events if ev.type in outputs})
    removed = []
    for artifact in store.get_artifacts_by_id(artifact_ids) if artifact_ids else []:
        try:
            empty = bool(artifact.uri) and fs.isdir(artifact.uri) and \
                not fs.files_under(artifact.uri)
        except Exception:  # noqa: BLE001  (something odd left there: kept, not a blocker)
            empty = False
        if empty:
            fs.remove(artifact.uri)
            removed.append(artifact.uri)
    lines = []
    for e in running:
        e.last_known_state = metadata_store_pb2.Execution.FAILED
        e.custom_properties[ABANDONED_PROPERTY].string_value = (
            f"found RUNNING at {now} by the next run holding the workdir's run lock: its "
            "run was killed")
        lines.append(f"{names.get(e.type_id, 'execution')} (execution {e.id})")
    store.put_executions(running)
    return [f"{line}: left RUNNING by a killed run, marked FAILED" for line in lines] + \
        [f"removed its empty output folder {uri}" for uri in removed]


def latest_execution_id(metadata_path: str) -> int:
    """The newest execution's id in the store (0 for none): what a run started after."""
    if not fs.isfile(metadata_path):
        return 0
    return max((e.id for e in _store(metadata_path, read_only=True).get_executions()),
               default=0)


def outputs_since(metadata_path: str, since_execution_id: int) -> Dict[str, list]:
    """Artifacts output by the executions after ``since_execution_id`` (one run's,
    cached ones included: TFX links a cached execution to the outputs it reuses),
    by artifact type name, newest first."""
    from ml_metadata.proto import metadata_store_pb2

    store = _store(metadata_path, read_only=True)
    ids = [e.id for e in store.get_executions() if e.id > since_execution_id]
    if not ids:
        return {}
    events = store.get_events_by_execution_ids(ids)
    artifact_ids = sorted({ev.artifact_id for ev in events
                           if ev.type == metadata_store_pb2.Event.OUTPUT})
    types = {t.id: t.name for t in store.get_artifact_types()}
    out: Dict[str, list] = {}
    for artifact in sorted(store.get_artifacts_by_id(artifact_ids) if artifact_ids else [],
                           key=lambda a: a.id, reverse=True):
        out.setdefault(types.get(artifact.type_id, ""), []).append(artifact)
    return out


class Progress(threading.Thread):
    """Says each component's start and end, with its seconds, as MLMD records them:
    polls the store's executions newer than the run's start (a daemon thread;
    ``stop()`` reports what is left and joins)."""

    def __init__(self, metadata_path: str, say: Callable[[str], None],
                 interval_s: float = 1.0):
        super().__init__(daemon=True)
        self._path, self._say, self._interval = metadata_path, say, interval_s
        self._done = threading.Event()
        self._first_id: Optional[int] = None
        self._seen: Dict[int, int] = {}  # execution id -> last state said

    def start(self) -> None:
        try:
            self._first_id = latest_execution_id(self._path)
        except Exception:  # a store another process holds: no progress lines, no harm
            return
        super().start()

    def poll(self) -> None:
        """One look at the store: a line for every start and end not said yet."""
        from ml_metadata.proto import metadata_store_pb2 as pb

        if not fs.isfile(self._path):
            return
        store = _store(self._path, read_only=True)
        names = _type_names(store)
        ended = {pb.Execution.COMPLETE: "done", pb.Execution.CACHED: "cached",
                 pb.Execution.FAILED: "failed", pb.Execution.CANCELED: "canceled"}
        for e in sorted(store.get_executions(), key=lambda e: e.id):
            if e.id <= (self._first_id or 0) or self._seen.get(e.id) == e.last_known_state:
                continue
            name = names.get(e.type_id, "execution")
            if e.id not in self._seen and e.last_known_state not in ended:
                self._say(f"{name}: started")
            elif e.last_known_state in ended:
                seconds = (e.last_update_time_since_epoch - e.create_time_since_epoch) / 1000
                self._say(f"{name}: {ended[e.last_known_state]} in {seconds:.1f}s")
            self._seen[e.id] = e.last_known_state

    def run(self) -> None:
        while not self._done.wait(self._interval):
            try:
                self.poll()
            except OSError:  # stderr's reader left: nothing more to say to anyone
                return
            except Exception:  # a busy SQLite file: the next poll says it
                time.sleep(self._interval)

    def stop(self) -> None:
        """Stops polling and says what is left; never raises: a progress line that
        cannot be read or written must not replace the run's own outcome."""
        self._done.set()
        if self.ident is None:  # never started
            return
        self.join()
        try:
            self.poll()
        except Exception:  # a locked store, a stderr whose reader left
            pass
