"""The filesystem layer: every artifact or data path may be a URI.

Cores read and write through these functions (``tf.io.gfile`` underneath, so
local paths, ``gs://`` and ``s3://`` take the same code path), never through
``os.path``/``open``/``glob``/``shutil``. Beam pipelines use Beam's
``FileSystems`` inside their transforms; tools that need local files
(torch.load, onnx2tf, onnxruntime, the TFLite converter) get a local copy from
:func:`local_copy` and write back with :func:`upload_tree`.

``s3://`` needs ``tensorflow-io`` (the ``[s3]`` extra); it is imported and
configured from the standard AWS variables the first time an s3 path is seen
(see :mod:`tfx_bridge.objectstore`).

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> write_text(join(root, "a", "b.txt"), "hi")
    >>> read_text(join(root, "a", "b.txt")), listdir(join(root, "a"))
    ('hi', ['b.txt'])
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import tempfile
from typing import Iterator, List, Tuple


def is_remote(path: str) -> bool:
    return "://" in path


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


def dirname(path: str) -> str:
    return posixpath.dirname(path.rstrip("/")) if is_remote(path) else os.path.dirname(path)


def _gfile(path: str):
    if path.startswith("s3://"):
        from tfx_bridge import objectstore

        objectstore.enable_s3()
    import tensorflow as tf

    return tf.io.gfile


def exists(path: str) -> bool:
    return _gfile(path).exists(path)


def isdir(path: str) -> bool:
    return _gfile(path).isdir(path)


def isfile(path: str) -> bool:
    g = _gfile(path)
    return g.exists(path) and not g.isdir(path)


def listdir(path: str) -> List[str]:
    return sorted(e.rstrip("/") for e in _gfile(path).listdir(path))


def glob(pattern: str) -> List[str]:
    return sorted(_gfile(pattern).glob(pattern))


def makedirs(path: str) -> None:
    _gfile(path).makedirs(path)


def size(path: str) -> int:
    return _gfile(path).stat(path).length


def read_bytes(path: str) -> bytes:
    with _gfile(path).GFile(path, "rb") as f:
        return f.read()


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def write_bytes(path: str, data: bytes) -> None:
    """Writes ``data`` (parents made). Local writes go through a temp file and a
    rename, so a reader never sees half a file; an object appears whole."""
    g = _gfile(path)
    parent = dirname(path)
    if parent:
        g.makedirs(parent)
    if is_remote(path):
        with g.GFile(path, "wb") as f:
            f.write(data)
        return
    fd, tmp = tempfile.mkstemp(dir=parent or ".", prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def open_file(path: str, mode: str = "rb"):
    return _gfile(path).GFile(path, mode)


def copy(src: str, dst: str, overwrite: bool = True) -> None:
    _gfile(dst).copy(src, dst, overwrite=overwrite)


def rename(src: str, dst: str, overwrite: bool = False) -> None:
    """Atomic on local disk; on object stores a copy then a delete (not atomic)."""
    g = _gfile(src)
    if is_remote(src) and g.isdir(src):
        copy_tree(src, dst)
        g.rmtree(src)
        return
    g.rename(src, dst, overwrite=overwrite)


def remove(path: str) -> None:
    """Deletes a file or a folder tree; nothing if it does not exist."""
    g = _gfile(path)
    if g.isdir(path):
        g.rmtree(path)
    elif g.exists(path):
        g.remove(path)


def walk(top: str) -> Iterator[Tuple[str, List[str], List[str]]]:
    for root, dirs, files in _gfile(top).walk(top):
        yield root, [d.rstrip("/") for d in dirs], list(files)


def files_under(top: str) -> List[str]:
    """Relative paths (with '/') of every file under ``top``, sorted."""
    out = []
    for root, _, files in walk(top):
        rel = os.path.relpath(root, top) if not is_remote(top) else \
            root[len(top.rstrip("/")):].strip("/")
        for name in files:
            out.append(name if rel in (".", "") else f"{rel.replace(os.sep, '/')}/{name}")
    return sorted(out)


def copy_tree(src: str, dst: str, last: Tuple[str, ...] = ()) -> None:
    """Copies every file under ``src`` to ``dst``; relative paths in ``last`` are
    copied after all others (e.g. ``saved_model.pb``, so a reader polling for it
    finds every other file already there)."""
    files = files_under(src)
    ordered = [f for f in files if f not in last] + [f for f in files if f in last]
    for rel in ordered:
        target = join(dst, *rel.split("/"))
        makedirs(dirname(target))
        copy(join(src, *rel.split("/")), target)


@contextlib.contextmanager
def local_copy(path: str, prefix: str = "tfx-bridge-") -> Iterator[str]:
    """A local path holding ``path`` (file or folder): itself when local, else a
    temporary copy removed afterwards. For tools that only read local files."""
    if not is_remote(path):
        yield path
        return
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        local = os.path.join(work, basename(path) or "data")
        if isdir(path):
            copy_tree(path, local)
        else:
            copy(path, local)
        yield local
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def local_output(path: str, prefix: str = "tfx-bridge-") -> Iterator[str]:
    """A local folder to write into, uploaded to ``path`` when the block succeeds
    (itself when ``path`` is local)."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)
        yield path
        return
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
        copy_tree(work, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
