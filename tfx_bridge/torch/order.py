"""Record order by content: which reader takes a record, and in what order a
reader yields its records, from the records' decoded values and a seed only.

Why: a runner decides how many files an Examples split is written into and in
what order (the DirectRunner writes one file, Beam's portable runner with two
SDK workers two, bundles land in any order). A shuffle over files and chunks
then trains different weights from the same records and seed. Keyed by content,
the DirectRunner run and the cluster run of the same inputs train the same
weights, and a rerun on a runner that reorders its bundles changes nothing.

Everything here is numpy over whole chunks (no Python per record). No TFX or
torch imports.

Example:
    >>> import numpy as np
    >>> a = {"x": np.array([3, 1, 2], np.int64), "y": np.array([0.5, 0.25, 1.0], np.float32)}
    >>> b = {k: v[[2, 0, 1]] for k, v in a.items()}  # the same records, another layout
    >>> [a["x"][i] for i in canonical(row_words(a))] == [b["x"][i] for i in canonical(row_words(b))]
    True
    >>> bool((keys(row_words(a), 7) == keys(row_words(a), 7)).all())
    True
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from tfx_bridge.hashing import GOLDEN, mix64

_M64 = (1 << 64) - 1


def row_words(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each record's values as one row of little-endian uint64 words: ``[n, W]``.

    Features in name order, each feature's values in their declared dtype (the
    bytes a training batch holds), zero-padded to a whole word.
    """
    names = sorted(arrays)
    n = len(arrays[names[0]]) if names else 0
    parts = []
    for name in names:
        values = np.asarray(arrays[name])
        little = values.astype(values.dtype.newbyteorder("<"), copy=False)
        parts.append(np.ascontiguousarray(little).reshape(n, -1).view(np.uint8))
    raw = np.concatenate(parts, axis=1) if parts else np.zeros((n, 0), np.uint8)
    pad = -raw.shape[1] % 8
    if pad or not raw.shape[1]:
        raw = np.concatenate([raw, np.zeros((n, pad or 8), np.uint8)], axis=1)
    return np.ascontiguousarray(raw).view("<u8").astype(np.uint64, copy=False)


def keys(words: np.ndarray, seed: int) -> np.ndarray:
    """A seeded 64-bit key per row of :func:`row_words`: equal rows, equal keys;
    a record's reader is ``key % readers``."""
    start = np.full(len(words), (int(seed) * int(GOLDEN) + 1) & _M64, np.uint64)
    h = mix64(start)
    for column in range(words.shape[1]):
        h = mix64(h ^ words[:, column])
    return h


def canonical(words: np.ndarray) -> np.ndarray:
    """Indices that sort the rows by their words: the same records in any file
    layout come out in one order (equal records are interchangeable)."""
    if not len(words):
        return np.zeros(0, np.int64)
    return np.lexsort(words.T[::-1])
