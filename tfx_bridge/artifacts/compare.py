"""Output comparison: one definition of "the same numbers" for every check.

Used by the importer (converted vs torch/onnxruntime) and the optimizer
(candidate vs original). Floats: max abs and rel error, a value within
``atol + rtol * |reference|``, NaN matching NaN and an infinity the same
infinity (anything else against an infinity is a mismatch, whatever ``rtol``);
integer and bool outputs: exact. A different shape (or, when ``same_dtype``,
dtype) is a mismatch of every element.

Example:
  >>> import numpy as np
  >>> compare(np.array([1.0, 2.0]), np.array([1.0, 2.00001]), atol=1e-4).ok
  True
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Comparison:
    max_abs: float
    max_rel: float
    mismatches: int
    ok: bool


def is_exact_dtype(dtype) -> bool:
    """Integer and bool outputs (ids, top-k indices, flags) must match exactly."""
    dtype = np.dtype(dtype)
    return bool(np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.bool_))


def compare(reference, got, atol: float, rtol: float = 0.0,
            same_dtype: bool = False) -> Comparison:
    r, g = np.asarray(reference), np.asarray(got)
    if r.shape != g.shape or (same_dtype and r.dtype != g.dtype):
        return Comparison(float("inf"), float("inf"), int(max(r.size, g.size)), False)
    if is_exact_dtype(r.dtype):
        diff = np.abs(r.astype(np.int64) - g.astype(np.int64))
        bad = int(np.count_nonzero(diff))
        return Comparison(float(diff.max(initial=0)), 0.0, bad, bad == 0)
    rf, gf = r.astype(np.float64), g.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: an infinity on both sides is handled below
        diff = np.abs(rf - gf)
    # NaN matching NaN, and an infinity matching the same infinity (a masked logit, the
    # log of a zero probability), are the same numbers.
    same = (np.isnan(rf) & np.isnan(gf)) | (np.isinf(rf) & (rf == gf))
    diff[same] = 0.0
    with np.errstate(invalid="ignore"):  # inf / inf: set below
        rel = diff / np.maximum(np.abs(rf), 1e-12)
    rel[np.isinf(diff)] = np.inf  # a value against another infinity
    rel[same] = 0.0  # |NaN| would make the bound and the ratio NaN too
    with np.errstate(invalid="ignore"):  # rtol x inf is inf or NaN: the finite diff decides
        within = np.isfinite(diff) & (diff <= atol + rtol * np.abs(rf))
    bad = int(np.count_nonzero(~(within | same)))
    return Comparison(float(diff.max(initial=0)), float(rel.max(initial=0)), bad, bad == 0)
