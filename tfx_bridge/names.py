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
  tfx_bridge.errors.BridgeError: model name '../evil' cannot be used as a folder name: ...
"""
from __future__ import annotations

import re
from typing import Type

from tfx_bridge.errors import BridgeError

_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


def check_segment(value: str, what: str, error: Type[Exception] = BridgeError) -> str:
    """``value`` if it is a safe single path segment, else ``error`` naming it and the rule."""
    if not isinstance(value, str) or not _SEGMENT.match(value):
        raise error(
            f"{what} {value!r} cannot be used as a folder name: use 1-128 letters, digits, "
            "'_', '-' or '.', not starting with '.' or '-' (e.g. 'ctr' or 'ctr_v2').")
    return value
