"""splitmix64's finaliser on uint64 arrays: the one mixing step behind every
content hash here (ParquetExampleGen's split assignment, the PyTorch reader's
record keys). Both must stay bit-stable: the first decides which split a row
lands in, the second which reader reads a record and in what order.

Changing the constants or the steps below moves rows between splits and
records between readers for every user: the values pinned in
tests/tfx_bridge/test_hashing.py must never change.

Example: splitmix64 seeded with 0 returns mix64 of the multiples of GOLDEN,
whose first two outputs are the published reference values.

    >>> import numpy as np
    >>> [hex(int(h)) for h in mix64(np.array([1, 2], np.uint64) * GOLDEN)]
    ['0xe220a8397b1dcdaf', '0x6e789e6aa1b965f4']
    >>> int(mix64(np.array([0], np.uint64))[0])  # zero maps to zero
    0
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
