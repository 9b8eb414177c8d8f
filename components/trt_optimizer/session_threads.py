"""TF Serving's inter-op setting for the kept model, measured where the server runs
it: Session::Run of serving_default with a pool of inter-op threads (what TF Serving
starts with) against every node of a call run in the calling thread
(``--tensorflow_inter_op_parallelism=-1``, tfx_bridge/serving_threads.py). No TFX
imports.

A small graph spends most of a call handing each node to the pool and waiting for
it (docs/BENCHMARKS.md: a one-op graph's Session::Run costs 0.16 ms with the pool,
0.06 ms in the calling thread); a graph with parallel branches may lose their
overlap. So it is measured, in the timing child (oneDNN off, the server's
allocator), in interleaved rounds, and the calling thread is recommended only by
the candidates' rule: at least 5% faster at every batch size beyond the rounds'
spread (``decide.speedup``). The report's ``session`` holds the figures and the
choice; the pusher applies it to a target with the same cores
(serving_pusher/tuning.py).
"""
from __future__ import annotations

import dataclasses
import subprocess
from typing import Dict, List, Optional

import numpy as np

from tfx_bridge.components.trt_optimizer import decide, measure_worker
from tfx_bridge.components.trt_optimizer.errors import OptimizerError
from tfx_bridge.components.trt_optimizer.results import Speedup
from tfx_bridge.errors import short_message
from tfx_bridge.serving_threads import CALLER_THREAD, SESSION_FLAGS, usable_cores

POOL, CALLER = "inter-op-pool", "calling-thread"
# Of the optimizer's time budget: a second, smaller measurement of one model.
BUDGET_SHARE = 0.25


def measure_session(saved_model_dir: str, feeds: Dict[int, Dict[str, np.ndarray]],
                    time_budget_s: float, iterations: int,
                    cores: Optional[int] = None) -> dict:
    """The report's ``session``: ``inter_op_parallelism`` is ``CALLER_THREAD`` when
    the calling thread passed the rule at every batch size of ``feeds``, else None
    (the pool kept), with the reason, the figures and the plan. A measurement
    that fails is recorded as such, never raised: the model is sound without it."""
    cores = cores or usable_cores()
    alpha = decide.ALPHA  # one comparison: no share of alpha to give away
    budget = time_budget_s * BUDGET_SHARE
    session = _session(cores)
    # The pool's session first: TF sizes its global inter-op pool by the first one.
    folders = {POOL: (saved_model_dir, [], {"intra_op": cores, "inter_op": cores}),
               CALLER: (saved_model_dir, [], {"intra_op": cores, "inter_op": CALLER_THREAD})}
    try:
        latency, info = measure_worker.time_in_child(
            folders, feeds, budget, iterations, decide.min_rounds(alpha),
            timeout_s=max(600.0, 20 * budget),
            refuse={"reference": POOL, "alpha": alpha, "margin": decide.MARGIN})
    except (OptimizerError, subprocess.TimeoutExpired) as e:
        return unmeasured(short_message(e), cores)
    pool = {lat.batch: lat for lat in latency.get(POOL, [])}
    speedups = [decide.speedup(lat, pool[lat.batch], alpha)
                for lat in latency.get(CALLER, []) if lat.batch in pool]
    passed = len(speedups) == len(feeds) and all(s.refused is None for s in speedups)
    if passed:
        session["inter_op_parallelism"] = CALLER_THREAD
        session["reason"] = (
            f"each call in its calling thread (--{SESSION_FLAGS[1]}={CALLER_THREAD}): at "
            f"least {1 - decide.MARGIN:.0%} faster than a pool of {cores} at every batch "
            f"size beyond the rounds' spread ({_figures(speedups)})")
    else:
        session["reason"] = (f"TF Serving's inter-op pool of {cores} threads kept: "
                             + _refusal(speedups, len(feeds)))
    session["speedup"] = [dataclasses.asdict(s) for s in speedups]
    session["latency"] = {name: [dataclasses.asdict(lat) for lat in rows]
                          for name, rows in latency.items()}
    session["timing"] = info
    return session


def _session(cores: int) -> dict:
    """The report's ``session`` before a choice: the pool, TF Serving's default."""
    return {"cores": cores, "intra_op_parallelism": cores, "inter_op_parallelism": None,
            "timed": "Session::Run of serving_default"}


def unmeasured(why: str, cores: Optional[int] = None) -> dict:
    """The report's ``session`` when the measurement did not run or failed (``why``):
    the pool, TF Serving's default, kept."""
    cores = cores or usable_cores()
    return {**_session(cores), "reason": f"not measured ({why}); TF Serving's inter-op "
                                         f"pool of {cores} threads is kept"}


def _figures(speedups: List[Speedup]) -> str:
    return ", ".join(f"batch {s.batch} ratio {s.ratio:.3f} bound {s.bound:.3f}"
                     for s in speedups)


def _refusal(speedups: List[Speedup], batches: int) -> str:
    failed = next((s for s in speedups if s.refused), None)
    if failed is None:
        return f"timed at {len(speedups)} of {batches} batch sizes"
    return (f"the calling thread at batch {failed.batch}: ratio {failed.ratio:.3f}, bound "
            f"{failed.bound:.3f} over {failed.rounds} rounds, {failed.refused}")


__all__ = ["CALLER", "POOL", "measure_session", "unmeasured"]
