"""The local-disk backend of :mod:`tfx_bridge.storage.fs` (paths without a scheme).

Writes go through a temp file and a rename, so a reader never sees half a file.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import IO, Iterator, List, Tuple


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


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path: str, data: bytes, sync: bool = False) -> None:
    """``sync`` fsyncs the file and its folder, so the write survives a power loss."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent or ".", prefix=".tmp-")
    try:
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


def open_file(path: str, mode: str = "rb") -> IO:
    return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def copy(src: str, dst: str, overwrite: bool = True) -> None:
    if not overwrite and os.path.exists(dst):
        raise FileExistsError(f"{dst} exists")
    shutil.copyfile(src, dst)


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
