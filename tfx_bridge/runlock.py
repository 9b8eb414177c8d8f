"""One run at a time: an exclusive lock on a local folder (a pipeline's workdir, a
serving base path), naming its holder.

``flock`` on a file in the folder: the kernel releases it when the holder dies,
however it dies, so a crashed or killed run never blocks the next one. The
holder writes who it is (pid, host, start time, command) into the file and
empties it when it finishes; a run that finds the lock free but the file still
naming a holder knows that holder died holding it, takes the lock over and
says so. Object-store paths take no lock here: every shared write there is
conditional (the pusher's object-store publisher). The lock is per host: two
machines sharing a workdir over NFS are not serialized by it (a workdir holds MLMD's
SQLite file, which is not safe to share that way either).

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with run_lock(d, command="tfx-bridge run") as taken_over:
    ...         print(taken_over)
    None
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
from typing import Iterator, Optional

from tfx_bridge.errors import BridgeError, Busy

LOCK_FILE = ".tfx-bridge-run.lock"
_MAX_HOLDER_BYTES = 4096  # what a holder writes is small; a bigger file is not ours


class RunLocked(Busy):
    """Another run holds the lock: nothing is wrong with the input; retry later.

    The CLI exits 4 (busy, retryable).
    """


class RunLockError(BridgeError):
    """The lock file is not a regular file this run can open (a FIFO, a symlink)."""


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a run lock."""

    pid: int
    host: str
    started: str  # ISO 8601, UTC
    command: str

    def describe(self) -> str:
        return (f"pid {self.pid} on {self.host}, started {self.started}, "
                f"command: {self.command}")

    @classmethod
    def parse(cls, text: str) -> Optional[Holder]:
        """The holder a lock file names; None when it names none (or not readably):
        the file is untrusted, read with the bounded JSON reader every other file
        goes through, and a pid that is no int (``Infinity``, ``1e999``) names no one."""
        from tfx_bridge.limits import LimitError, loads_json

        try:
            fields = loads_json(text, "the lock file", max_bytes=_MAX_HOLDER_BYTES)
            pid = fields["pid"]
            if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
                return None
            return cls(pid, str(fields["host"]), str(fields["started"]),
                       str(fields["command"]))
        except (ValueError, TypeError, KeyError, LimitError):
            return None


def _this_run(command: Optional[str]) -> Holder:
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return Holder(os.getpid(), socket.gethostname(), started,
                  command or " ".join(os.path.basename(a) if i == 0 else a
                                      for i, a in enumerate(sys.argv))[:500])


def _read(fd: int) -> str:
    return os.pread(fd, _MAX_HOLDER_BYTES, 0).decode("utf-8", errors="replace")


def open_folder(folder: str) -> int:
    """A folder's descriptor, refusing a symlink in its place at the moment it is
    opened (``O_NOFOLLOW``): files opened through it (``dir_fd``) are inside the
    folder that was checked, whatever is swapped in at its path meanwhile."""
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            what = "a symlink" if os.path.islink(folder) else "not a folder"
            raise RunLockError(f"{folder} is {what}; a lock's folder must be a real folder "
                               "(a link would carry the lock and what it guards "
                               "elsewhere).") from e
        raise


def open_lock_file(path: str, dir_fd: Optional[int] = None) -> int:
    """A lock file (created if absent), opened without following a symlink or
    blocking on a FIFO: the one opener of every lock (run locks, the pusher's).
    With ``dir_fd`` (:func:`open_folder`) ``path`` is its name inside that folder."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644,
                     dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunLockError(f"{path} is a symlink; remove it (a lock is a plain file "
                               "tfx-bridge makes itself, never a link).") from e
        if e.errno == errno.EISDIR:
            raise RunLockError(f"{path} is a folder; remove it (a lock is a plain file "
                               "tfx-bridge makes itself).") from e
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunLockError(f"{path} is not a regular file; remove it (a lock is a plain "
                           "file tfx-bridge makes itself).")
    return fd


def wait_for_flock(fd: int, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Takes an exclusive ``flock`` on ``fd``, waiting up to ``timeout_s`` seconds;
    False when another holder kept it that long."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def _held(fd: int, path: str, what: str, timeout_s: float) -> RunLocked:
    holder = Holder.parse(_read(fd))
    who = holder.describe() if holder else "a holder that has not said who"
    waited = (f"Waited {timeout_s:g}s for it" if timeout_s
              else "Not waiting for it (--lock-timeout 0)")
    return RunLocked(
        f"Another run holds {what} ({path}): {who}. {waited}. Nothing is wrong "
        "with the input: retry when that run finishes, or wait for it with "
        "--lock-timeout SECONDS.")


def wait_while_held(folder: str, timeout_s: float = 0.0, what: str = "this workdir",
                    name: str = LOCK_FILE) -> float:
    """Before a run's slow start (imports of many seconds): waits up to ``timeout_s``
    while another run holds ``folder``'s run lock, then raises :class:`RunLocked`
    as :func:`run_lock` would, so a busy folder is refused at once, not after the
    imports. Creates and holds nothing (a folder or lock file that is missing or
    not plain is left for :func:`run_lock` to refuse); returns the seconds it waited,
    to be taken off the timeout :func:`run_lock` is given."""
    from tfx_bridge.storage import fs

    if fs.is_remote(folder):
        return 0.0
    path = os.path.join(folder, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0.0
    start = time.monotonic()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0.0
        if not wait_for_flock(fd, timeout_s, poll_s=0.2):
            raise _held(fd, path, what, timeout_s)
        return time.monotonic() - start
    finally:
        os.close(fd)  # releases it at once: the run takes it with run_lock


def model_lock_name(model_name: str) -> str:
    """The run lock file of a served model, in its serving base path: the same for
    every route that runs a pipeline (``run``, ``demo``, the Kubeflow local runner)."""
    return f".tfx-bridge-run-{model_name}.lock"


@contextlib.contextmanager
def run_lock(folder: str, timeout_s: float = 0.0, command: Optional[str] = None,
             what: str = "this workdir", name: str = LOCK_FILE) -> Iterator[Optional[Holder]]:
    """Holds ``folder``'s run lock for the block; yields the holder it took the lock
    over from (a run that died holding it), or None.

    Waits up to ``timeout_s`` seconds for another holder (0: refuse at once),
    then raises :class:`RunLocked` naming it. ``name`` is the lock file's
    (a dot-name: TF Serving and the pusher skip those in a base path).
    """
    from tfx_bridge.storage import fs

    if fs.is_remote(folder):
        yield None
        return
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise RunLockError(f"{folder} is a file, not a folder: give a folder for {what}.")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    fd = open_lock_file(path)
    try:
        if not wait_for_flock(fd, timeout_s, poll_s=0.2):
            raise _held(fd, path, what, timeout_s)
        # A holder that finished emptied the file; one still named here died holding it.
        taken_over = Holder.parse(_read(fd))
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(dataclasses.asdict(_this_run(command))).encode(), 0)
        os.fsync(fd)
        try:
            yield taken_over
        finally:  # a run that ends, well or not, says so; only a killed one cannot
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock
