"""One rule for every user string that becomes a path segment or a key.

Model names, split names and the like end up as folder names (``Split-<name>``,
``<base>/<name>/``) and as keys in configs. A value must be 1-128 characters of
letters, digits, ``_``, ``-`` and ``.``, not start with ``.`` (hidden files,
``..``) or ``-`` (flags), so it can never leave its folder, nest, or collide
with the library's own dot-files. No TFX imports.

Example:
  >>> check_segment("ctr-v2", "model name")
  'ctr-v2'
  >>> check_segment("../evil", "model name")  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ...
  tfx_bridge.storage.names.UnsafeNameError: model name '../evil' cannot be used as a ...
"""
from __future__ import annotations

import re
from typing import Optional

from tfx_bridge.errors import BridgeError

_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


class UnsafeNameError(BridgeError):
    """A user string that cannot be a path segment, or a path that would leave its root."""


class NotAFileError(BridgeError):
    """A FIFO, socket or device where a file is read: opening it could hang forever."""


def kind_of(mode: int) -> str:
    """What a non-regular ``st_mode`` is, in words."""
    import stat

    return ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISBLK(mode) or stat.S_ISCHR(mode) else "not a file")


def check_relative(rel: str, root: str) -> str:
    """``rel`` (with '/') if it names a path inside ``root``: no empty, '.' or '..'
    segment and no NUL, as an object store key or a listing may hold. Else
    :class:`UnsafeNameError` naming the key: it would lead out of ``root`` (or
    nowhere) once mapped onto a local folder."""
    parts = rel.split("/")
    if not rel or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise UnsafeNameError(
            f"{root} holds {rel!r}, which is not a path inside it (an empty, '.' or '..' "
            "segment, or a NUL byte): copying it would write outside the copy's folder. "
            "Remove that key (or file) and retry.")
    return rel


def check_segment(value: str, what: str) -> str:
    """``value`` if it is a safe single path segment, else :class:`UnsafeNameError`
    naming it and the rule."""
    if not isinstance(value, str) or not _SEGMENT.fullmatch(value):
        raise UnsafeNameError(
            f"{what} {value!r} cannot be used as a folder name: use 1-128 letters, digits, "
            "'_', '-' or '.', not starting with '.' or '-' (e.g. 'ctr' or 'ctr_v2').")
    return value


def is_inside(path: str, root: str) -> bool:
    """``path`` resolves to ``root`` or below it (links followed for local paths)."""
    import os
    import posixpath

    if "://" in root or "://" in path:
        scheme = root.split("://", 1)[0] + "://"
        if not path.startswith(scheme):
            return False
        r = posixpath.normpath(root[len(scheme):])
        p = posixpath.normpath(path[len(scheme):])
        return p == r or p.startswith(r.rstrip("/") + "/")
    r = os.path.realpath(root)
    p = os.path.realpath(path)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def child(root: str, *parts: str) -> str:
    """``root`` joined with ``parts``, refused unless it resolves inside ``root``.

    Every write and delete under a root goes through this, so a name that
    slipped past validation (or a link planted inside the root) cannot turn a
    write or delete into one outside it.

    Example:
      >>> child("/srv/models", "ctr", "3")
      '/srv/models/ctr/3'
    """
    import os
    import posixpath

    join = posixpath.join if "://" in root else os.path.join
    path = join(root, *parts)
    if not is_inside(path, root):
        raise UnsafeNameError(f"{path} resolves outside {root}; refusing to write or delete there. "
                    "A name or a symlink inside the folder points out of it: remove the link "
                    "or fix the name.")
    return path


def uri_problem(uri: str) -> Optional[str]:
    """Why an object store URI cannot name a folder: a '.', '..' or empty segment
    after the bucket. Object stores do not resolve them, so ``s3://b/base/../x``
    would make keys holding a literal ``..``. None for a clean URI (and for
    local paths, which the OS resolves)."""
    if "://" not in uri:
        return None
    scheme, rest = uri.split("://", 1)
    parts = rest.rstrip("/").split("/")
    if not parts[0] or any(p in ("", ".", "..") for p in parts[1:]) or "\0" in rest:
        return (f"{uri} has an empty, '.' or '..' segment (object stores keep them "
                f"literally); give the folder it means, e.g. {scheme}://bucket/models")
    return None
