"""Stated limits on what untrusted inputs declare, checked before anything is
allocated (docs/TRUST.md). An input over a limit is refused by name with the
limit and how to raise it; nothing grows with what an input merely claims.

- JSON (``--module-kwargs``, ``model_spec.json``, reports, configs, state):
  at most :data:`MAX_JSON_BYTES` and :data:`MAX_JSON_DEPTH` levels of nesting,
  measured by a scan, not by the recursive parser (which would end in a
  RecursionError).
- Check inputs (the importer's and optimizer's synthesized or read batches): at
  most :data:`MAX_CHECK_ELEMENTS` elements per input at the largest batch.
- Model parameters (a state_dict's module built from its kwargs, an ONNX file's
  declared initializers): at most ``TFX_BRIDGE_MAX_PARAMETER_BYTES`` (default
  :data:`DEFAULT_MAX_PARAMETER_BYTES`) in total.

No TFX imports.

Example:
    >>> loads_json('{"hidden": [64, 32]}', "--module-kwargs")
    {'hidden': [64, 32]}
    >>> loads_json("[" * 100 + "]" * 100, "--module-kwargs")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.limits.LimitError: --module-kwargs nests 100 levels deep; the limit is 64 ...
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Union

import numpy as np

from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs

MAX_JSON_BYTES = 16 << 20
MAX_JSON_DEPTH = 64
MAX_CHECK_ELEMENTS = 1 << 26  # 256 MiB of float32 per input, at the largest check batch
DEFAULT_MAX_PARAMETER_BYTES = 16 << 30
PARAMETER_BYTES_ENV = "TFX_BRIDGE_MAX_PARAMETER_BYTES"

# A string, or an unterminated one running to the end: one match from its opening
# quote, so the scan stays linear however the quotes and escapes are arranged.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.S)


class LimitError(BridgeError):
    """An input declares more than a stated limit allows (exit 2)."""


def json_depth(data: bytes) -> int:
    """The deepest nesting of ``[`` / ``{`` in JSON text, strings skipped; no recursion."""
    bare = np.frombuffer(_STRING.sub(b"", data), np.uint8)
    if not bare.size:
        return 0
    steps = ((bare == ord("[")) | (bare == ord("{"))).astype(np.int8)
    steps -= ((bare == ord("]")) | (bare == ord("}"))).astype(np.int8)
    return int(max(0, np.cumsum(steps, dtype=np.int32).max()))


def loads_json(text: Union[str, bytes], what: str, max_bytes: int = MAX_JSON_BYTES,
               max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` of untrusted text, its size and nesting checked first.

    Raises :class:`LimitError` over a limit and ``ValueError`` (json's) for text
    that is not JSON, so callers keep their own "not JSON" message.
    """
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if len(data) > max_bytes:
        raise LimitError(f"{what} is {len(data):,} bytes; the limit is {max_bytes:,} "
                         "for JSON tfx-bridge reads. Give a smaller document.")
    depth = json_depth(data)
    if depth > max_depth:
        raise LimitError(f"{what} nests {depth} levels deep; the limit is {max_depth} "
                         "(JSON settings and specs are flat). Flatten it.")
    return json.loads(data)


def read_json(path: str, error: Callable[[str], Exception], fix: str,
              max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON document in the file ``path`` (a URI), its size checked before a
    byte is read, then :func:`loads_json`'s checks.

    A file over ``max_bytes`` or not JSON raises ``error`` (the caller's typed
    error) naming the file, what is wrong and ``fix``; one nested too deeply
    raises :class:`LimitError`.
    """
    size = fs.size(path)
    if size > max_bytes:
        raise error(f"{path} is {size:,} bytes, over the {max_bytes:,} a file of its kind "
                    f"holds. {fix}")
    try:
        return loads_json(fs.read_bytes(path), str(path), max_bytes)
    except LimitError:
        raise
    except (UnicodeDecodeError, ValueError) as e:
        raise error(f"{path} is not JSON ({e}). {fix}") from e


def check_elements(count: int, what: str, limit: int = MAX_CHECK_ELEMENTS) -> int:
    """``count`` if at most ``limit``, else :class:`LimitError` naming ``what``."""
    if count > limit:
        raise LimitError(
            f"{what} needs {count:,} elements; the limit is {limit:,} per check input. "
            "Declare the real shape (a smaller fixed dimension, or -1 for a free one).")
    return count


def max_parameter_bytes() -> int:
    text = os.environ.get(PARAMETER_BYTES_ENV)
    if text is None:
        return DEFAULT_MAX_PARAMETER_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value <= 0:
        raise LimitError(f"{PARAMETER_BYTES_ENV}={text!r}: give a positive number of bytes.")
    return value


def check_parameter_bytes(total: int, what: str) -> int:
    """``total`` if at most the parameter limit, else :class:`LimitError`."""
    limit = max_parameter_bytes()
    if total > limit:
        raise LimitError(
            f"{what} declares {total:,} bytes of parameters; the limit is {limit:,}. "
            f"Check the sizes it was given, or raise {PARAMETER_BYTES_ENV} for a model "
            "that really is this large.")
    return total
