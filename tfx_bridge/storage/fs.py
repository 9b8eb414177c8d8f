"""The filesystem API every core uses: every artifact or data path may be a URI.

Cores read and write through these functions, never through
``os.path``/``open``/``glob``/``shutil``. Each call goes to the backend of the
path's scheme, modules with the same function names (Beam's FileSystems
pattern): :mod:`~tfx_bridge.storage.local` for paths without a scheme,
:mod:`~tfx_bridge.storage.s3` (boto3, the ``[s3]`` extra, configured by the
standard AWS variables) for ``s3://``, :mod:`~tfx_bridge.storage.gfile`
(tf.io.gfile) for ``gs://`` and TensorFlow's other schemes. A new scheme is
one backend module and one entry in :data:`BACKENDS`.

Beam pipelines use Beam's ``FileSystems`` inside their transforms; tools that
need local files (torch.load, onnx2tf, onnxruntime, the TFLite converter) get
local copies from :func:`staged_locally` (:func:`local_copy` down,
:func:`local_output` up).

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> write_text(join(root, "a", "b.txt"), "hi")
    >>> read_text(join(root, "a", "b.txt")), listdir(join(root, "a"))
    ('hi', ['b.txt'])
"""
from __future__ import annotations

import contextlib
import importlib
import os
import posixpath
import shutil
import tempfile
from typing import Iterator, List, Optional, Tuple

from tfx_bridge.storage import local
from tfx_bridge.storage.names import check_relative

# Scheme -> backend module (imported on first use: s3 needs boto3, gfile TensorFlow).
BACKENDS = {"s3": "tfx_bridge.storage.s3"}
DEFAULT_REMOTE = "tfx_bridge.storage.gfile"  # any other scheme: TensorFlow's filesystems


def is_remote(path: str) -> bool:
    return "://" in path


def _backend(path: str):
    if not is_remote(path):
        return local
    scheme = path.split("://", 1)[0]
    return importlib.import_module(BACKENDS.get(scheme, DEFAULT_REMOTE))


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


def dirname(path: str) -> str:
    return posixpath.dirname(path.rstrip("/")) if is_remote(path) else os.path.dirname(path)


def exists(path: str) -> bool:
    return _backend(path).exists(path)


def isdir(path: str) -> bool:
    return _backend(path).isdir(path)


def isfile(path: str) -> bool:
    """Something that is not a folder is there (locally a FIFO or device counts, so
    that readers refuse it by name instead of finding nothing)."""
    return _backend(path).isfile(path)


def check_regular(path: str) -> None:
    """Refuses a local FIFO, socket or device where a file is read
    (:class:`~tfx_bridge.storage.names.NotAFileError`): for readers that open the
    path themselves (torch, onnx, TensorFlow) and would block on it. Objects in a
    store are always files."""
    if not is_remote(path):
        local.check_regular(path)


def listdir(path: str) -> List[str]:
    return _backend(path).listdir(path)


def glob(pattern: str) -> List[str]:
    return _backend(pattern).glob(pattern)


def makedirs(path: str) -> None:
    """A folder and its parents; on object stores folders are key prefixes (s3:
    nothing to make; gs: a marker, except at a bucket root)."""
    _backend(path).makedirs(path)


def size(path: str) -> int:
    return _backend(path).size(path)


def read_bytes(path: str, nofollow: bool = False) -> bytes:
    """``nofollow``: a local symlink is refused, not followed (for state and config
    files, which tfx-bridge writes itself and never as links)."""
    if nofollow and not is_remote(path):
        return local.read_bytes(path, nofollow=True)
    return _backend(path).read_bytes(path)


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def write_bytes(path: str, data: bytes, sync: bool = False) -> None:
    """Writes ``data`` (parents made). A reader never sees half a file: local writes
    go through a temp file and a rename, an object appears whole. ``sync`` (local
    disk) fsyncs the file and its folder, so the write survives a power loss."""
    _backend(path).write_bytes(path, data, sync=sync)


def write_text(path: str, text: str, sync: bool = False) -> None:
    write_bytes(path, text.encode("utf-8"), sync=sync)


def _only(path: str, name: str, where: str):
    fn = getattr(_backend(path), name, None)
    if fn is None:
        raise NotImplementedError(f"{name.replace('_', ' ')} on {path}: {where}")
    return fn


def create_if_absent(path: str, data: bytes) -> bool:
    """Creates ``path`` only if nothing is there; False if something was. Atomic
    against concurrent creators: O_EXCL locally, ``If-None-Match: *`` on s3."""
    return _only(path, "create_if_absent", "local disk and s3:// only")(path, data)


def read_tagged(path: str) -> Tuple[Optional[bytes], Optional[str]]:
    """(bytes, version tag) of an object store file, (None, None) if absent: the tag
    makes a later :func:`write_if` conditional on nobody having changed it."""
    return _only(path, "read_tagged", "object stores (s3://) only")(path)


def write_if(path: str, data: bytes, tag: Optional[str]) -> bool:
    """Writes only if ``path`` still has version ``tag`` (None: only if absent); False
    when another writer changed it first. Object stores (s3://) only: on local disk
    the caller holds a lock instead."""
    return _only(path, "write_if", "object stores (s3://) only")(path, data, tag)


def open_file(path: str, mode: str = "rb"):
    return _backend(path).open_file(path, mode)


def read_tail(path: str, n: int) -> bytes:
    """The last ``n`` bytes of a file (all of it when shorter), the rest not read."""
    return _backend(path).read_tail(path, n)


def hash_file(h, path: str, chunk: int = 1 << 20) -> None:
    """Feeds ``path``'s bytes to the hashlib object ``h`` in bounded chunks (a model
    file may be larger than memory should hold at once)."""
    with open_file(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)


def content_digest(path: str) -> str:
    """sha256 of what ``path`` holds: a file's bytes, or a folder's files (each
    relative path, then its bytes, in sorted order). Two paths with this digest
    hold the same content, whatever their names or times; it changes with one byte.

    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> write_text(os.path.join(folder, "a.txt"), "1")
    >>> before = content_digest(folder)
    >>> write_text(os.path.join(folder, "a.txt"), "2")
    >>> before != content_digest(folder)
    True
    """
    import hashlib

    h = hashlib.sha256()
    if not isdir(path):
        h.update(b"file\0")
        hash_file(h, path)
        return h.hexdigest()
    h.update(b"folder\0")
    for rel in files_under(path):
        file = join(path, rel)
        # The length before the bytes: no two trees frame into one byte stream.
        h.update(f"{rel}\0{size(file)}\0".encode())
        hash_file(h, file)
    return h.hexdigest()


def copy(src: str, dst: str, overwrite: bool = True) -> None:
    source, target = _backend(src), _backend(dst)
    if source is target:
        source.copy(src, dst, overwrite=overwrite)
    elif {source.__name__, target.__name__} == {local.__name__, DEFAULT_REMOTE}:
        importlib.import_module(DEFAULT_REMOTE).copy(src, dst, overwrite=overwrite)
    else:  # across backends (s3 and local, s3 and gs): streamed through this process
        if not overwrite and exists(dst):
            raise FileExistsError(f"{dst} exists")
        with open_file(src, "rb") as fin, open_file(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)


def rename(src: str, dst: str, overwrite: bool = False) -> None:
    """Atomic on local disk; on object stores a copy then a delete (not atomic)."""
    source = _backend(src)
    if is_remote(src) and isdir(src):
        copy_tree(src, dst)
        remove(src)
    elif source is _backend(dst) and hasattr(source, "rename"):
        source.rename(src, dst, overwrite=overwrite)
    else:
        copy(src, dst, overwrite=overwrite)
        remove(src)


def remove(path: str) -> None:
    """Deletes a file or a folder tree; nothing if it does not exist."""
    _backend(path).remove(path)


def walk(top: str) -> Iterator[Tuple[str, List[str], List[str]]]:
    """(folder, sub-folder names, file names), top down, names sorted."""
    yield from _backend(top).walk(top)


def files_under(top: str) -> List[str]:
    """Relative paths (with '/') of every file under ``top``, sorted: the one
    listing every tree copy maps onto a local folder. Each is checked to be a path
    inside ``top`` (an object store key such as ``m/../../x`` is refused,
    :class:`~tfx_bridge.storage.names.UnsafeNameError`), and locally a regular
    file (a FIFO, socket or device is refused, :class:`~tfx_bridge.storage.names.
    NotAFileError`), before anything is copied."""
    out = []
    for root, _, files in walk(top):
        rel = local.relative(root, top) if not is_remote(top) else \
            root[len(top.rstrip("/")):].strip("/")
        for name in files:
            path = f"{rel}/{name}" if rel else name
            out.append(check_relative(path, top))
            if not is_remote(top):
                local.check_regular(os.path.join(root, name))
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
def staged_locally(*paths: Optional[str], output: Optional[str] = None,
                   prefix: str = "tfx-bridge-") -> Iterator[tuple]:
    """Copy down, run, copy up: the one way a core runs local-only tools on URIs.

    Yields a tuple: a local path for each of ``paths`` (itself when local, else
    a temporary copy removed afterwards; None stays None), then, when
    ``output`` is given, a local folder uploaded to it when the block succeeds
    (``output`` itself when local). A failed block uploads nothing.
    """
    with contextlib.ExitStack() as stack:
        local = [None if p is None else stack.enter_context(local_copy(p, prefix))
                 for p in paths]
        if output is not None:
            local.append(stack.enter_context(local_output(output, prefix)))
        yield tuple(local)


@contextlib.contextmanager
def local_copy(path: str, prefix: str = "tfx-bridge-") -> Iterator[str]:
    """A local path holding ``path`` (file or folder): itself when local, else a
    temporary copy removed afterwards. For tools that only read local files."""
    if not is_remote(path):
        yield path
        return
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        target = os.path.join(work, basename(path) or "data")
        if isdir(path):
            copy_tree(path, target)
        else:
            copy(path, target)
        yield target
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def local_output(path: str, prefix: str = "tfx-bridge-") -> Iterator[str]:
    """A local folder to write into, uploaded to ``path`` when the block succeeds
    (itself when ``path`` is local)."""
    if not is_remote(path):
        local.makedirs(path)
        yield path
        return
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
        copy_tree(work, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
