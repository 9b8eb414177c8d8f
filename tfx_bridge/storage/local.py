"""The local-disk backend of :mod:`tfx_bridge.storage.fs` (paths without a scheme).

Writes go through a temp file and a rename, so a reader never sees half a file.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from typing import IO, Iterator, List, Tuple

from tfx_bridge.storage.names import NotAFileError, UnsafeNameError, kind_of


def exists(path: str) -> bool:
    return os.path.exists(path)


def isdir(path: str) -> bool:
    return os.path.isdir(path)


def isfile(path: str) -> bool:
    """Something that is not a folder is there (a FIFO or device counts, so that
    readers refuse it by name instead of finding nothing)."""
    return os.path.exists(path) and not os.path.isdir(path)


def listdir(path: str) -> List[str]:
    return sorted(os.listdir(path))


def glob(pattern: str) -> List[str]:
    """TensorFlow's glob, as for every other scheme (its ``*`` also matches names
    starting with '.', which Python's glob skips: a hidden file a pattern matches is
    refused or read, never silently left out)."""
    import tensorflow as tf

    return sorted(tf.io.gfile.glob(pattern))


def makedirs(path: str) -> None:
    os.makedirs(path, exist_ok=True)


def size(path: str) -> int:
    return os.path.getsize(path)


def read_tail(path: str, n: int) -> bytes:
    with open_file(path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - n))
        return f.read(n)


def read_bytes(path: str, nofollow: bool = False) -> bytes:
    with open_file(path, "rb", nofollow=nofollow) as f:
        return f.read()


def _umask() -> int:
    """This process's umask: from /proc (Linux), else by setting it and back (which a
    thread creating a file at that moment could see)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes(path: str, data: bytes, sync: bool = False) -> None:
    """``sync`` fsyncs the file and its folder, so the write survives a power loss."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent or ".", prefix=".tmp-")
    try:
        # mkstemp makes the file 0600; what it replaces is read by others (TF Serving
        # running as another user reads models.config and the batching file), so it
        # gets the mode any file this process creates gets: 0666 under the umask.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            folder = os.open(parent or ".", os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def create_if_absent(path: str, data: bytes) -> bool:
    """O_EXCL: atomic against concurrent creators."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return True


def open_file(path: str, mode: str = "rb", nofollow: bool = False) -> IO:
    """``open``; for reading, a regular file only: a FIFO, socket or device is
    refused at once (:class:`NotAFileError`) instead of blocking the reader.
    ``nofollow`` refuses a symlink (state and config files tfx-bridge writes itself
    are never links, so one planted there is not followed out of its folder)."""
    kwargs = {} if "b" in mode else {"encoding": "utf-8"}
    if "r" not in mode or "+" in mode:
        return open(path, mode, **kwargs)
    import errno
    import fcntl

    try:
        # Looked at before it is opened: opening a socket fails (ENXIO) and opening a
        # device can act on it (a tape rewinds).
        seen = (os.lstat if nofollow else os.stat)(path).st_mode
    except FileNotFoundError:
        seen = None
    if seen is not None and nofollow and stat.S_ISLNK(seen):
        raise _planted_link(path)
    if seen is not None and not (stat.S_ISREG(seen) or stat.S_ISDIR(seen)):
        raise _not_a_file(path, seen)
    # O_NONBLOCK: a FIFO swapped in since the stat still cannot block the open.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if nofollow else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if nofollow and e.errno == errno.ELOOP:
            raise _planted_link(path) from e
        if e.errno == errno.ENXIO:
            raise NotAFileError(f"{path} is a socket or a device, not a regular file. "
                                "Remove it (only regular files are read).") from e
        raise
    try:
        mode_bits = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode_bits):
            if stat.S_ISDIR(mode_bits):
                raise IsADirectoryError(f"{path} is a folder")
            raise _not_a_file(path, mode_bits)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return open(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def copy(src: str, dst: str, overwrite: bool = True) -> None:
    if not overwrite and os.path.exists(dst):
        raise FileExistsError(f"{dst} exists")
    check_regular(src)
    shutil.copyfile(src, dst)


def check_regular(path: str) -> None:
    """:class:`NotAFileError` unless ``path`` (links followed) is a regular file or a
    folder: a FIFO, socket or device would hang or never end when read."""
    mode = os.stat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise _not_a_file(path, mode)


def _planted_link(path: str) -> UnsafeNameError:
    try:
        target = f" -> {os.readlink(path)}"
    except OSError:
        target = ""
    return UnsafeNameError(f"{path} is a symlink{target}; tfx-bridge writes this file itself "
                           "and never as a link, so it is not followed. Remove the link.")


def _not_a_file(path: str, mode: int) -> NotAFileError:
    return NotAFileError(f"{path} is {kind_of(mode)}, not a regular file: reading it could "
                         "hang. Remove it (only regular files are read).")


def rename(src: str, dst: str, overwrite: bool = False) -> None:
    """Atomic (one filesystem)."""
    if not overwrite and os.path.exists(dst):
        raise FileExistsError(f"{dst} exists")
    os.replace(src, dst)


def remove(path: str) -> None:
    """A file, a link (not its target) or a folder tree; nothing if absent."""
    if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
        os.remove(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def walk(top: str) -> Iterator[Tuple[str, List[str], List[str]]]:
    # Links are followed, as TF's walk did (push and the importer refuse links that
    # leave a model folder before anything is copied).
    for root, dirs, files in os.walk(top, followlinks=True):
        dirs.sort()
        yield root, dirs, sorted(files)


def relative(root: str, top: str) -> str:
    """``root`` (from :func:`walk`) relative to ``top``, with '/' ('' for top)."""
    rel = os.path.relpath(root, top)
    return "" if rel == "." else rel.replace(os.sep, "/")
