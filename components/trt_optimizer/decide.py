"""Which model is kept: the original unless a candidate is faster by a margin at every
batch size, beyond what the host's noise explains. No TensorFlow, no TFX.

The rule, per candidate that passed the drift gate and per batch size timed:

- Each interleaved round gives one paired ratio, the candidate's round median over
  the original's round median in that same round. Both ran back to back, so load
  that changes slower than a round cancels out of the ratio.
- The sign test gives a distribution-free upper confidence bound on the median of
  those ratios: with ``n`` rounds, the ``k``-th smallest ratio, ``k`` the least rank
  with P(Binomial(n, 1/2) <= k - 1) >= 1 - alpha, lies above the true median with
  probability at least 1 - alpha, whatever the ratios' distribution (rounds are
  taken as independent draws; rotating the order inside each round keeps
  position effects out of them).
- The candidate passes a batch size when that bound is at most :data:`MARGIN`
  (0.95: at least 5% faster). A median above the margin fails on the margin; a
  median within it whose bound is not fails on the spread.
- It is kept only when it passes at every batch size: an intersection-union test,
  so the chance of replacing the original with a model that is not 5% faster at
  some batch size stays below alpha without a correction over batch sizes.
  Several candidates share alpha (Bonferroni: each gets alpha / m), so the chance
  that any of them passes by luck stays below alpha too.
- Among the candidates that pass, the one with the smallest geometric mean of
  median ratios is kept. Otherwise the original is kept, and the reason names
  each candidate's first failing batch size with its figures.

Example:
    >>> upper_rank(15, 0.05), upper_rank(5, 0.05), upper_rank(4, 0.05)
    (12, 5, None)
    >>> min_rounds(0.05), min_rounds(0.05 / 4)
    (5, 7)
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

from tfx_bridge.artifacts import compare
from tfx_bridge.components.trt_optimizer.results import (
    BACKEND_TENSORRT,
    NOT_TIMED,
    CandidateResult,
    Latency,
    Speedup,
)

MARGIN = 0.95  # a candidate's ratio bound must be at most this: at least 5% faster
ALPHA = 0.05  # the chance, per run, of keeping a candidate the rule should have refused


def candidate_alpha(candidates: int, alpha: float = ALPHA) -> float:
    """Each candidate's share of ``alpha`` when ``candidates`` are compared (Bonferroni)."""
    return alpha / max(1, candidates)


def upper_rank(n: int, alpha: float) -> Optional[int]:
    """The 1-based rank of the sorted ratios that bounds their median from above at
    confidence 1 - ``alpha`` (sign test), or None when ``n`` rounds are too few."""
    below = 0.0  # P(Binomial(n, 1/2) <= k - 1)
    for k in range(1, n + 1):
        below += math.comb(n, k - 1) / 2.0 ** n
        if below >= 1.0 - alpha:
            return k
    return None


def min_rounds(alpha: float) -> int:
    """The fewest rounds whose sign-test bound exists at ``alpha`` (the largest ratio
    then bounds the median: 1 - 2**-n >= 1 - alpha)."""
    return max(1, math.ceil(math.log2(1.0 / alpha) - 1e-12))


def speedup(candidate: Latency, original: Latency, alpha: float,
            margin: float = MARGIN) -> Speedup:
    """The candidate against the original at one batch size, from their round medians."""
    pairs = list(zip(candidate.rounds_ms, original.rounds_ms, strict=True))
    ratios = sorted(c / o for c, o in pairs if o > 0)
    if not ratios:
        return Speedup(candidate.batch, math.inf, math.inf, math.inf, 0,
                       "no rounds were timed")
    n = len(ratios)
    median = (ratios[(n - 1) // 2] + ratios[n // 2]) / 2
    rank = upper_rank(n, alpha)
    bound = ratios[rank - 1] if rank is not None else ratios[-1]  # no bound: the largest
    refused = None
    if median > margin:
        refused = (f"margin: median ratio {median:.3f} is above {margin:.2f} "
                   f"(not {1 - margin:.0%} faster)")
    elif rank is None:
        refused = f"spread: {n} rounds give no bound at alpha {alpha:.3g}"
    elif bound > margin:
        refused = (f"spread: the rounds' {1 - alpha:.1%} upper bound {bound:.3f} is above "
                   f"{margin:.2f} (rounds {ratios[0]:.3f}..{ratios[-1]:.3f})")
    return Speedup(candidate.batch, median, ratios[0], bound, n, refused)


def judge(results: Sequence[CandidateResult], alpha: float = ALPHA,
          margin: float = MARGIN) -> None:
    """Fills ``speedup`` of every timed candidate in ``results`` (the first is the
    original), alpha shared among them."""
    base = results[0]
    timed = [r for r in results[1:] if r.passed and r.latency]
    share = candidate_alpha(len(timed), alpha)
    for r in timed:
        # A candidate refused at a smaller batch size was not timed at the larger ones.
        by_batch = {lat.batch: lat for lat in r.latency}
        r.speedup = [speedup(by_batch[o.batch], o, share, margin)
                     for o in base.latency if o.batch in by_batch]


def choose(results: List[CandidateResult], trt: bool) -> Tuple[CandidateResult, str]:
    """The kept candidate and why, after :func:`judge`. On a TensorRT host the TRT
    build is the candidate (it is validated, and failing it is reported, not hidden)."""
    base = results[0]
    if trt:
        trt_result = next((r for r in results if r.backend == BACKEND_TENSORRT), None)
        if trt_result is not None and trt_result.error is None:
            return trt_result, "TF-TRT built and validated on this host"
        why = trt_result.error if trt_result is not None else "no TF-TRT build"
        return base, f"kept the original: TF-TRT did not build ({why})"
    batches = len(base.latency)
    passing = [r for r in results[1:] if r.passed and len(r.speedup) == batches
               and all(s.refused is None for s in r.speedup)]
    if passing:
        best = min(passing, key=lambda r: sum(math.log(s.ratio) for s in r.speedup))
        return best, (f"kept {best.name}: at least {1 - MARGIN:.0%} faster at every batch "
                      f"size beyond the rounds' spread ({_figures(best.speedup)})")
    reasons = [_refusal(r) for r in results[1:]]
    return base, "kept the original: " + ("; ".join(reasons) or "no candidate was tried")


def _figures(speedups: Sequence[Speedup]) -> str:
    return ", ".join(f"batch {s.batch} ratio {s.ratio:.3f} bound {s.bound:.3f}"
                     for s in speedups)


def _drifted(drifts) -> str:
    """Each output beyond the tolerance once: what changed in its contract, or its
    largest error over the batch sizes checked (NaN the worst) and the largest |value|
    it had. An error about 1e-6 of that value is float32 rounding, and the tolerance
    (``atol``), not the candidate, is what to change for outputs that large."""
    worst: Dict[str, Tuple[float, Optional[float], Optional[str]]] = {}
    for d in drifts:
        if d.ok:
            continue
        a, scale, changed = worst.get(d.output, (0.0, None, None))
        if math.isnan(d.max_abs) or d.max_abs > a:
            a = a if math.isnan(a) else d.max_abs
        scales = [x for x in (scale, d.scale) if x is not None]
        worst[d.output] = (a, max(scales) if scales else None, changed or d.changed)
    said = "; ".join(f"{name}: {_error(a, scale, changed)}"
                     for name, (a, scale, changed) in worst.items())
    atols = [None if changed else compare.rounding_atol(a, scale)
             for a, scale, changed in worst.values()]
    if atols and None not in atols:  # every one is float32 rounding at its scale
        said += f"; float32 rounding at that scale: atol={max(atols):g} passes it"
    return said


def _error(max_abs: float, scale: Optional[float], changed: Optional[str]) -> str:
    if changed is not None:
        return changed
    if math.isnan(max_abs):
        return "NaN against a number"
    if math.isinf(max_abs):
        return "an infinity against another value"
    return f"max abs {max_abs:.3g}" + (f" on values up to {scale:.3g}" if scale is not None
                                       else "")


def _refusal(r: CandidateResult) -> str:
    if r.error is not None and r.error.startswith(NOT_TIMED):
        return f"{r.name} {r.error}"
    if r.error is not None:
        return f"{r.name} did not build ({r.error})"
    if not r.passed:
        return f"{r.name} drifted ({_drifted(r.drift)})"
    failed = next((s for s in r.speedup if s.refused), None)
    if failed is None:
        return f"{r.name} was not timed"
    return (f"{r.name} at batch {failed.batch}: ratio {failed.ratio:.3f}, bound "
            f"{failed.bound:.3f} over {failed.rounds} rounds, {failed.refused}")


__all__ = ["ALPHA", "MARGIN", "choose", "judge", "min_rounds", "speedup", "upper_rank"]
