"""splitmix64's finaliser on uint64 arrays: the one mixing step behind every
content hash here (ParquetExampleGen's split assignment, the PyTorch reader's
record keys). Both must stay bit-stable: the first decides which split a row
lands in, the second which reader reads a record and in what order.

Example:
    >>> import numpy as np
    >>> int(mix64(np.array([1], np.uint64))[0]) == int(mix64(np.array([1], np.uint64))[0])
    True
"""
from __future__ import annotations

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / the golden ratio, odd


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (uint64 arithmetic wraps, as the algorithm means)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
