"""Output comparison: one definition of "the same numbers" for every check.

Used by the importer (converted vs torch/onnxruntime) and the optimizer
(candidate vs original). Floats: max abs and rel error, a value within
``atol + rtol * |reference|``, NaN matching NaN and an infinity the same
infinity (anything else against an infinity is a mismatch, whatever ``rtol``);
integer and bool outputs: exact. A different shape (or, when ``same_dtype``,
dtype) is a mismatch of every element. An error is read against the output's
scale (:func:`scale`, its largest finite value): within ``ROUNDING_SHARE`` of it,
it is float32 rounding, and :func:`rounding_atol` names the tolerance that
passes it.

Example:
  >>> import numpy as np
  >>> compare(np.array([1.0, 2.0]), np.array([1.0, 2.00001]), atol=1e-4).ok
  True
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

# An error within this share of an output's largest |value| is float32 rounding: one
# rounding is 6e-8 of a value, and a deep graph computed in another order (another
# runtime's kernels, fused or split) sums many of them.
ROUNDING_SHARE = 1e-5


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


def scale(reference) -> Optional[float]:
    """The largest finite |value| of a float output (None for integer and bool ones,
    and where none is finite): what an absolute error is read against, since float32
    rounding grows with it."""
    r = np.asarray(reference)
    if not np.issubdtype(r.dtype, np.floating):
        return None
    finite = np.abs(r[np.isfinite(r)])
    return float(finite.max()) if finite.size else None


def rounding_atol(max_abs: Optional[float], scale: Optional[float]) -> Optional[float]:
    """The atol that passes an error of ``max_abs`` on values up to ``scale`` (about
    twice the error, one significant digit, rounded up) when that error is float32
    rounding at that scale (within ROUNDING_SHARE of it); None when it is more, or
    not a finite float error.

    >>> rounding_atol(2.82e-4, 456.0)
    0.0006
    >>> rounding_atol(0.05, 456.0) is None
    True
    """
    if (max_abs is None or scale is None or not math.isfinite(max_abs) or max_abs <= 0
            or max_abs > ROUNDING_SHARE * max(1.0, scale)):
        return None
    exponent = math.floor(math.log10(2 * max_abs))
    return float(f"{math.ceil(2 * max_abs / 10 ** exponent) * 10 ** exponent:.1g}")


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
