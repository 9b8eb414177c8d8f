"""The filesystem layer: every artifact or data path may be a URI.

Cores read and write through these functions (local paths through the os
module, ``gs://`` through ``tf.io.gfile``, ``s3://`` through boto3, behind one
set of calls), never through ``os.path``/``open``/``glob``/``shutil``. Beam
pipelines use Beam's ``FileSystems`` inside their transforms; tools that need local files
(torch.load, onnx2tf, onnxruntime, the TFLite converter) get a local copy from
:func:`local_copy` and write back through :func:`local_output`.

``s3://`` goes through boto3 (:mod:`tfx_bridge.storage.s3`, the ``[s3]`` extra),
configured by the standard AWS variables; ``gs://`` through TF's built-in
filesystem.

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
from typing import Iterator, List, Optional, Tuple


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


def _s3(path: str):
    """The s3 backend (boto3) for s3:// paths, else None (tf.io.gfile)."""
    if path.startswith("s3://"):
        from tfx_bridge.storage import s3

        return s3
    return None


def _gfile(path: str):
    import tensorflow as tf

    return tf.io.gfile


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    s3 = _s3(path)
    return s3.exists(path) if s3 else _gfile(path).exists(path)


def isdir(path: str) -> bool:
    if not is_remote(path):
        return os.path.isdir(path)
    s3 = _s3(path)
    return s3.isdir(path) if s3 else _gfile(path).isdir(path)


def isfile(path: str) -> bool:
    """Something that is not a folder is there (locally: a FIFO or device counts,
    so that readers refuse it by name instead of finding nothing)."""
    if not is_remote(path):
        return os.path.exists(path) and not os.path.isdir(path)
    s3 = _s3(path)
    if s3:
        return s3.isfile(path)
    g = _gfile(path)
    return g.exists(path) and not g.isdir(path)


def listdir(path: str) -> List[str]:
    if not is_remote(path):
        return sorted(os.listdir(path))
    s3 = _s3(path)
    if s3:
        return s3.listdir(path)
    return sorted(e.rstrip("/") for e in _gfile(path).listdir(path))


def glob(pattern: str) -> List[str]:
    s3 = _s3(pattern)
    return s3.glob(pattern) if s3 else sorted(_gfile(pattern).glob(pattern))


def makedirs(path: str) -> None:
    """Local folders (and parents); on object stores folders are key prefixes, so
    only gs:// gets a marker, and nothing for a bucket root."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)
        return
    if "/" not in path.split("://", 1)[1].strip("/") or _s3(path):
        return
    _gfile(path).makedirs(path)


def size(path: str) -> int:
    if not is_remote(path):
        return os.path.getsize(path)
    s3 = _s3(path)
    return s3.size(path) if s3 else _gfile(path).stat(path).length


def read_bytes(path: str) -> bytes:
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    s3 = _s3(path)
    if s3:
        return s3.read_bytes(path)
    with _gfile(path).GFile(path, "rb") as f:
        return f.read()


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def write_bytes(path: str, data: bytes, sync: bool = False) -> None:
    """Writes ``data`` (parents made). Local writes go through a temp file and a
    rename, so a reader never sees half a file; an object appears whole. ``sync``
    (local disk) fsyncs the file and its folder, so the write survives a power loss."""
    s3 = _s3(path)
    if s3:
        s3.write_bytes(path, data)
        return
    parent = dirname(path)
    if is_remote(path):  # no folders to make: keys carry their prefixes
        with _gfile(path).GFile(path, "wb") as f:
            f.write(data)
        return
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


def write_text(path: str, text: str, sync: bool = False) -> None:
    write_bytes(path, text.encode("utf-8"), sync=sync)


def create_if_absent(path: str, data: bytes) -> bool:
    """Creates ``path`` only if nothing is there; False if something was. Atomic
    against concurrent creators: O_EXCL locally, ``If-None-Match: *`` on s3."""
    s3 = _s3(path)
    if s3:
        return s3.create_if_absent(path, data)
    if is_remote(path):
        raise NotImplementedError(f"conditional create on {path.split('://')[0]}://")
    os.makedirs(dirname(path) or ".", exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return True


def read_tagged(path: str) -> Tuple[Optional[bytes], Optional[str]]:
    """(bytes, version tag) of an object store file, (None, None) if absent: the tag
    makes a later :func:`write_if` conditional on nobody having changed it."""
    s3 = _s3(path)
    if not s3:
        raise NotImplementedError(f"conditional reads on {path}: object stores (s3://) only")
    return s3.read_tagged(path)


def write_if(path: str, data: bytes, tag: Optional[str]) -> bool:
    """Writes only if ``path`` still has version ``tag`` (None: only if absent); False
    when another writer changed it first. Object stores (s3://) only: on local disk
    the caller holds a lock instead."""
    s3 = _s3(path)
    if not s3:
        raise NotImplementedError(f"conditional writes on {path}: object stores (s3://) only")
    return s3.write_if(path, data, tag)


def open_file(path: str, mode: str = "rb"):
    if not is_remote(path):
        return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    s3 = _s3(path)
    return s3.open_file(path, mode) if s3 else _gfile(path).GFile(path, mode)


def hash_file(h, path: str, chunk: int = 1 << 20) -> None:
    """Feeds ``path``'s bytes to the hashlib object ``h`` in bounded chunks (a model
    file may be larger than memory should hold at once)."""
    with open_file(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)


def copy(src: str, dst: str, overwrite: bool = True) -> None:
    if _s3(src) and _s3(dst):
        _s3(src).copy(src, dst)
        return
    if _s3(src) or _s3(dst):  # across backends: through this process
        with open_file(src, "rb") as fin, open_file(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        return
    if not is_remote(src) and not is_remote(dst):
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(f"{dst} exists")
        shutil.copyfile(src, dst)
        return
    _gfile(dst).copy(src, dst, overwrite=overwrite)


def rename(src: str, dst: str, overwrite: bool = False) -> None:
    """Atomic on local disk; on object stores a copy then a delete (not atomic)."""
    if is_remote(src) and isdir(src):
        copy_tree(src, dst)
        remove(src)
        return
    if _s3(src):
        copy(src, dst)
        remove(src)
        return
    if not is_remote(src) and not is_remote(dst):
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(f"{dst} exists")
        os.replace(src, dst)
        return
    _gfile(src).rename(src, dst, overwrite=overwrite)


def remove(path: str) -> None:
    """Deletes a file or a folder tree; nothing if it does not exist."""
    s3 = _s3(path)
    if s3:
        s3.remove(path)
        return
    if not is_remote(path):
        if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
            os.remove(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)
        return
    g = _gfile(path)
    if g.isdir(path):
        g.rmtree(path)
    elif g.exists(path):
        g.remove(path)


def walk(top: str) -> Iterator[Tuple[str, List[str], List[str]]]:
    if _s3(top):
        yield from _s3(top).walk(top)
        return
    if not is_remote(top):
        # Links are followed, as TF's walk did (push and the importer refuse links
        # that leave a model folder before anything is copied).
        for root, dirs, files in os.walk(top, followlinks=True):
            dirs.sort()
            yield root, dirs, sorted(files)
        return
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
        if not is_remote(target):
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
