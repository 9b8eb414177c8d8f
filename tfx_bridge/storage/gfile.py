"""The tf.io.gfile backend of :mod:`tfx_bridge.storage.fs`: ``gs://`` and the other
schemes TensorFlow registers (TensorFlow is imported on first use)."""
from __future__ import annotations

from typing import IO, Iterator, List, Tuple


def _g():
    import tensorflow as tf

    return tf.io.gfile


def exists(path: str) -> bool:
    return _g().exists(path)


def isdir(path: str) -> bool:
    return _g().isdir(path)


def isfile(path: str) -> bool:
    g = _g()
    return g.exists(path) and not g.isdir(path)


def listdir(path: str) -> List[str]:
    return sorted(e.rstrip("/") for e in _g().listdir(path))


def glob(pattern: str) -> List[str]:
    return sorted(_g().glob(pattern))


def makedirs(path: str) -> None:
    """A folder marker, except at a bucket root (nothing to make there)."""
    if "/" in path.split("://", 1)[1].strip("/"):
        _g().makedirs(path)


def size(path: str) -> int:
    return _g().stat(path).length


def read_tail(path: str, n: int) -> bytes:
    with _g().GFile(path, "rb") as f:
        f.seek(max(0, size(path) - n))
        return f.read(n)


def read_bytes(path: str) -> bytes:
    with _g().GFile(path, "rb") as f:
        return f.read()


def write_bytes(path: str, data: bytes, sync: bool = False) -> None:
    """An object appears whole; no folders to make (keys carry their prefixes)."""
    with _g().GFile(path, "wb") as f:
        f.write(data)


def open_file(path: str, mode: str = "rb") -> IO:
    return _g().GFile(path, mode)


def copy(src: str, dst: str, overwrite: bool = True) -> None:
    _g().copy(src, dst, overwrite=overwrite)


def rename(src: str, dst: str, overwrite: bool = False) -> None:
    _g().rename(src, dst, overwrite=overwrite)


def remove(path: str) -> None:
    g = _g()
    if g.isdir(path):
        g.rmtree(path)
    elif g.exists(path):
        g.remove(path)


def walk(top: str) -> Iterator[Tuple[str, List[str], List[str]]]:
    for root, dirs, files in _g().walk(top):
        yield root, [d.rstrip("/") for d in dirs], list(files)
