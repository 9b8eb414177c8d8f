"""``s3://`` for the filesystem layer, through boto3 (the ``[s3]`` extra).

boto3 reads the standard variables itself (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``), so nothing
is mapped here. tfx-bridge's own cores use this, not TF's s3 plug-in
(tensorflow-io 0.37.1 aborts the process at exit once it has touched s3;
see :mod:`tfx_bridge.storage.objectstore`). Folders are key prefixes; a key ending in
"/" is a folder marker. No TFX imports.
"""
from __future__ import annotations

import contextlib
import fnmatch
import functools
import inspect
import io
import threading
from typing import Iterator, List, Optional, Tuple

from tfx_bridge.storage.names import check_relative
from tfx_bridge.storage.objectstore import ObjectStoreError, check_credentials

_LOCAL = threading.local()


def _client():
    client = getattr(_LOCAL, "client", None)
    if client is None:
        check_credentials()
        try:
            import boto3
        except ImportError as e:
            raise ObjectStoreError("s3:// paths need boto3: pip install 'tfx-bridge[s3]'.") from e
        client = _LOCAL.client = boto3.session.Session().client("s3")
    return client


@contextlib.contextmanager
def _boto_errors(path: str):
    """boto3's errors as one ObjectStoreError naming the path and the fix (the CLI
    prints it as a refusal, exit 2, not as an internal error)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as e:
        err = e.response.get("Error", {})
        raise ObjectStoreError(
            f"{path}: {err.get('Code')} ({err.get('Message')}). Check the bucket name, "
            "and that AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY may access it.") from e
    except BotoCoreError as e:
        raise ObjectStoreError(f"{path}: {e}. Check AWS_ENDPOINT_URL, AWS_REGION and the "
                               "network.") from e


def _reported(fn):
    """Runs ``fn(path, ...)`` (or a generator function) inside :func:`_boto_errors`."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(path, *args, **kwargs):
            with _boto_errors(path):
                yield from fn(path, *args, **kwargs)
        return generator

    @functools.wraps(fn)
    def call(path, *args, **kwargs):
        with _boto_errors(path):
            return fn(path, *args, **kwargs)
    return call


def split(path: str) -> Tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key``."""
    rest = path[len("s3://"):]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ObjectStoreError(f"{path}: no bucket name (expected s3://bucket/key).")
    return bucket, key


def _prefix(key: str) -> str:
    return key.rstrip("/") + "/" if key.strip("/") else ""


def _is_missing(error) -> bool:
    code = str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


def _keys(bucket: str, prefix: str, delimiter: Optional[str] = None):
    """(keys, sub-prefixes) under ``prefix``."""
    paginator = _client().get_paginator("list_objects_v2")
    keys, prefixes = [], []
    kwargs = {"Bucket": bucket, "Prefix": prefix}
    if delimiter:
        kwargs["Delimiter"] = delimiter
    for page in paginator.paginate(**kwargs):
        keys += [o["Key"] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    return keys, prefixes


@_reported
def isfile(path: str) -> bool:
    from botocore.exceptions import ClientError

    bucket, key = split(path)
    if not key or key.endswith("/"):
        return False
    try:
        _client().head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as e:
        if _is_missing(e):
            return False
        raise


@_reported
def isdir(path: str) -> bool:
    bucket, key = split(path)
    page = _client().list_objects_v2(Bucket=bucket, Prefix=_prefix(key), MaxKeys=1)
    return bool(page.get("KeyCount", 0)) or not key


def exists(path: str) -> bool:
    return isfile(path) or isdir(path)


@_reported
def listdir(path: str) -> List[str]:
    bucket, key = split(path)
    prefix = _prefix(key)
    keys, prefixes = _keys(bucket, prefix, "/")
    names = {k[len(prefix):] for k in keys if k != prefix}
    names |= {p[len(prefix):].rstrip("/") for p in prefixes}
    return sorted(n for n in names if n)


@_reported
def walk(top: str) -> Iterator[Tuple[str, List[str], List[str]]]:
    """A walk like the os module's, one listing per folder: sub-prefixes are the folders, keys
    the files (folder markers, keys ending in "/", are skipped)."""
    bucket, key = split(top)
    prefix = _prefix(key)
    keys, prefixes = _keys(bucket, prefix, "/")
    dirs = sorted(p[len(prefix):].rstrip("/") for p in prefixes)
    files = sorted(k[len(prefix):] for k in keys if not k.endswith("/"))
    for name in dirs + files:  # "a//b" would walk "a/" forever, "a/../b" out of top
        check_relative(name, top)
    yield top.rstrip("/"), dirs, files
    for d in dirs:
        yield from walk(f"{top.rstrip('/')}/{d}")


@_reported
def glob(pattern: str) -> List[str]:
    """Keys matching ``pattern`` ('*' does not cross '/')."""
    bucket, key = split(pattern)
    fixed = key.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
    keys, _ = _keys(bucket, fixed)
    depth = key.count("/")
    out = set()
    for k in keys:
        parts = k.rstrip("/").split("/")
        if len(parts) > depth:
            candidate = "/".join(parts[:depth + 1])
            if fnmatch.fnmatchcase(candidate, key):
                out.add(f"s3://{bucket}/{candidate}")
    return sorted(out)


@_reported
def size(path: str) -> int:
    bucket, key = split(path)
    return int(_client().head_object(Bucket=bucket, Key=key)["ContentLength"])


@_reported
def read_tail(path: str, n: int) -> bytes:
    bucket, key = split(path)
    if size(path) == 0:  # a suffix range of an empty object is not satisfiable
        return b""
    return _client().get_object(Bucket=bucket, Key=key, Range=f"bytes=-{n}")["Body"].read()


class _Reader(io.RawIOBase):
    def __init__(self, path: str):
        bucket, key = split(path)
        self._body = _client().get_object(Bucket=bucket, Key=key)["Body"]

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        return self._body.read(None if n is None or n < 0 else n)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._body.close()
        super().close()


class _Writer(io.RawIOBase):
    """Buffers in a spooled temp file; the object appears whole on close."""

    def __init__(self, path: str):
        import tempfile

        self._path = path
        self._buf = tempfile.SpooledTemporaryFile(max_size=64 << 20)

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        return self._buf.write(b)

    def close(self) -> None:
        if not self.closed:
            bucket, key = split(self._path)
            self._buf.seek(0)
            _client().upload_fileobj(self._buf, bucket, key)
            self._buf.close()
        super().close()


@_reported
def open_file(path: str, mode: str = "rb"):
    if mode in ("rb", "r"):
        raw = _Reader(path)
        return io.TextIOWrapper(io.BufferedReader(raw), "utf-8") if mode == "r" else raw
    if mode in ("wb", "w"):
        raw = _Writer(path)
        return io.TextIOWrapper(raw, "utf-8") if mode == "w" else raw
    raise ValueError(f"mode {mode!r}")


@_reported
def read_bytes(path: str) -> bytes:
    bucket, key = split(path)
    return _client().get_object(Bucket=bucket, Key=key)["Body"].read()


@_reported
def write_bytes(path: str, data: bytes, sync: bool = False) -> None:
    """One PUT: the object appears whole, and is durable once it returns (``sync``
    changes nothing here)."""
    bucket, key = split(path)
    _client().put_object(Bucket=bucket, Key=key, Body=data)


def create_if_absent(path: str, data: bytes) -> bool:
    """Writes ``path`` only if no object is there (S3 ``If-None-Match: *``);
    False when another writer got there first. Two concurrent callers never
    both get True."""
    return write_if(path, data, None)


_CONFLICT = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


@_reported
def read_tagged(path: str) -> Tuple[Optional[bytes], Optional[str]]:
    """(bytes, ETag) of an object, or (None, None) when there is none."""
    from botocore.exceptions import ClientError

    bucket, key = split(path)
    try:
        got = _client().get_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if _is_missing(e):
            return None, None
        raise
    return got["Body"].read(), got["ETag"]


@_reported
def write_if(path: str, data: bytes, tag: Optional[str]) -> bool:
    """Writes ``path`` only if it still holds the object whose ETag is ``tag``
    (``If-Match``), or, with ``tag`` None, only if there is none (``If-None-Match: *``).
    False when another writer changed it first: re-read and retry."""
    from botocore.exceptions import ClientError

    bucket, key = split(path)
    condition = {"IfNoneMatch": "*"} if tag is None else {"IfMatch": tag}
    try:
        _client().put_object(Bucket=bucket, Key=key, Body=data, **condition)
        return True
    except ClientError as e:
        if str(e.response.get("Error", {}).get("Code", "")) in _CONFLICT or _is_missing(e):
            return False  # changed, or (If-Match) deleted since it was read
        raise


@_reported
def copy(src: str, dst: str, overwrite: bool = True) -> None:
    if not overwrite and isfile(dst):
        raise FileExistsError(f"{dst} exists")
    sb, sk = split(src)
    db, dk = split(dst)
    _client().copy({"Bucket": sb, "Key": sk}, db, dk)


@_reported
def remove(path: str) -> None:
    """Deletes an object, or every object under a prefix."""
    bucket, key = split(path)
    keys, _ = _keys(bucket, _prefix(key))
    if isfile(path):
        keys.append(key)
    for i in range(0, len(keys), 1000):
        _client().delete_objects(Bucket=bucket, Delete={
            "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})


def makedirs(path: str) -> None:
    """Folders are prefixes: nothing to make."""
