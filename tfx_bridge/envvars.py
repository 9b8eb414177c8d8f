"""One environment variable set for a block and restored after it (other
components may run in the same process; child processes started inside the
block inherit it).

Example:
    >>> import os
    >>> with scoped("TFX_BRIDGE_DOCTEST", "1"):
    ...     os.environ["TFX_BRIDGE_DOCTEST"]
    '1'
    >>> "TFX_BRIDGE_DOCTEST" in os.environ
    False
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional


@contextlib.contextmanager
def scoped(name: str, value: Optional[str]) -> Iterator[None]:
    """``name`` = ``value`` inside the block (None: left as it is), then as before."""
    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
