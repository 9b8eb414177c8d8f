"""Measuring candidates: latency (interleaved rounds, one process), drift against
the original, and servables loaded as TF Serving would load them."""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from tfx_bridge.artifacts import compare
from tfx_bridge.artifacts.savedmodel import (
    SERVING_SIGNATURE,
    TFLITE_FILE,
    TFLITE_FLAG,
)
from tfx_bridge.components.trt_optimizer.results import (
    Drift,
    Latency,
)

Clock = Callable[[], float]
TARGET_ROUNDS = 15  # rounds per batch size when the budget allows
WARMUP_SHARE = 0.1  # of the budget, at most, spent warming up and calibrating


def measure(fn: Callable, feeds: Dict, iterations: int, warmup: int = 10) -> Latency:
    """p50/p99 of wall time per call, after warm-up (XLA compiles in the warm-up)."""
    return measure_interleaved({"": (fn, feeds)}, iterations, rounds=1, warmup=warmup)[""]


def measure_interleaved(calls: Dict[str, tuple], iterations: int, rounds: int = 10,
                        warmup: int = 10, clock: Clock = time.perf_counter
                        ) -> Dict[str, Latency]:
    """``measure`` for several ``name: (fn, feeds)`` at once, in interleaved rounds, so
    a noisy moment on a shared host lands on every candidate, not on one."""
    for fn, feeds in calls.values():
        for _ in range(warmup):
            fn(**feeds)
    return measure_rounds(calls, rounds, max(1, iterations // rounds), clock)


def measure_rounds(calls: Dict[str, tuple], rounds: int, per_round: int,
                   clock: Clock = time.perf_counter) -> Dict[str, Latency]:
    """``rounds`` rounds of ``per_round`` timed calls of each ``name: (fn, feeds)``, the
    order rotated each round; every round's median is kept for the paired choice."""
    times: Dict[str, List[float]] = {name: [] for name in calls}
    medians: Dict[str, List[float]] = {name: [] for name in calls}
    order = list(calls)
    for r in range(rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            fn, feeds = calls[name]
            this_round = []
            for _ in range(per_round):
                start = clock()
                fn(**feeds)
                this_round.append(clock() - start)
            times[name] += this_round
            medians[name].append(float(np.median(this_round)) * 1e3)
    out = {}
    for name, (_, feeds) in calls.items():
        out[name] = Latency(_batch(feeds), float(np.percentile(times[name], 50) * 1e3),
                            float(np.percentile(times[name], 99) * 1e3), medians[name],
                            len(times[name]))
    return out


def _batch(feeds: Dict) -> int:
    return int(next(iter(feeds.values())).shape[0])


def calibrate(fn: Callable, feeds: Dict, seconds: float, most: int = 10,
              clock: Clock = time.perf_counter) -> float:
    """Seconds one call takes once warm: the first call (tracing, Grappler, XLA) is a
    warm-up and says nothing of the next (Grappler on a ResNet-50 makes it 10x a
    call); then up to ``most`` timed calls, only one once ``seconds`` are spent,
    and their median."""
    fn(**feeds)
    timed: List[float] = []
    while len(timed) < max(1, most) and (not timed or sum(timed) < seconds):
        start = clock()
        fn(**feeds)
        timed.append(clock() - start)
    return float(np.median(timed))


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one batch size is timed: ``rounds`` rounds of ``per_round`` calls each."""

    rounds: int
    per_round: int

    @property
    def calls(self) -> int:
        return self.rounds * self.per_round


def plan_rounds(round_s: Dict[int, float], budget_s: float, iterations: int,
                min_rounds: int, target_rounds: int = TARGET_ROUNDS) -> Dict[int, Plan]:
    """Rounds and calls per round for each batch size, from ``round_s``: the seconds
    one call of every servable takes at that batch size (one round of one call).

    The budget is shared between batch sizes, the cheapest first, so what one leaves
    goes to the others. Each gets ``target_rounds`` rounds (at most ``iterations``)
    of as many calls as fit, at most ``iterations`` calls per servable in all; when
    one call per round does not fit, fewer rounds, never fewer than ``min_rounds``
    (the choice needs them), so a slow model may take ``min_rounds`` x its round time
    whatever the budget.
    """
    rounds_cap = max(min_rounds, min(target_rounds, iterations))
    per_round_cap = max(1, iterations // rounds_cap)
    left, plans = budget_s, {}
    order = sorted(round_s, key=lambda b: (round_s[b], b))
    for i, b in enumerate(order):
        share, cost = max(0.0, left) / (len(order) - i), max(round_s[b], 1e-9)
        per_round = min(per_round_cap, max(1, int(share // (rounds_cap * cost))))
        rounds = rounds_cap
        if per_round == 1:
            rounds = min(rounds_cap, max(min_rounds, int(share // cost)))
        plans[b] = Plan(rounds, per_round)
        left -= plans[b].calls * cost
    return plans


def measure_budgeted(calls: Dict[int, Dict[str, tuple]], budget_s: float, iterations: int,
                     min_rounds: int, clock: Clock = time.perf_counter,
                     refuse: Optional[Callable[[Dict[str, Latency]], Set[str]]] = None
                     ) -> Tuple[Dict[int, Dict[str, Latency]], dict]:
    """Times ``{batch: {name: (fn, feeds)}}`` within about ``budget_s`` seconds: each
    servable is warmed up and calibrated at each batch size, rounds and calls are
    planned from that (:func:`plan_rounds`), then the batch sizes are timed in
    interleaved rounds, the smallest (cheapest, as a rule) first.

    ``refuse(latencies of one batch size) -> names`` drops the servables it names
    from the larger batch sizes (a candidate the choice already refused needs no
    more time). When one servable is left of several, it is timed for the record
    only: one round. Returns the latencies (a dropped servable lacks the batch sizes
    after its refusal) and what was planned and spent.
    """
    start = clock()
    pairs = sum(len(c) for c in calls.values())
    warm_s = budget_s * WARMUP_SHARE / max(1, pairs)
    round_s = {b: sum(calibrate(fn, feeds, warm_s, clock=clock) for fn, feeds in c.values())
               for b, c in calls.items()}
    calibration_s = clock() - start
    plans = plan_rounds(round_s, budget_s - calibration_s, iterations, min_rounds)
    timed, dropped = {}, set()
    for b in sorted(calls):
        active = {n: c for n, c in calls[b].items() if n not in dropped}
        if len(active) == 1 < len(calls[b]):
            plans[b] = Plan(1, plans[b].per_round)
        timed[b] = measure_rounds(active, plans[b].rounds, plans[b].per_round, clock)
        if refuse is not None:
            dropped |= set(refuse(timed[b]))
    spent = clock() - start
    info = {"budget_s": budget_s, "seconds": round(spent, 3),
            "calibration_s": round(calibration_s, 3),
            "plan": {str(b): {"rounds": plans[b].rounds, "calls_per_round": plans[b].per_round,
                              "call_s": round(round_s[b], 6), "timed": sorted(timed[b])}
                     for b in sorted(calls)}}
    return {b: timed[b] for b in sorted(timed)}, info


def _topk_agreement(ref: np.ndarray, got: np.ndarray) -> float:
    """Fraction of rows whose index sets agree (order-free), for [B, k] index outputs."""
    if ref.ndim != 2 or ref.shape != got.shape:
        return float(np.mean(ref == got)) if ref.shape == got.shape else 0.0
    return float(np.mean([set(a) == set(b) for a, b in zip(ref.tolist(), got.tolist(),
                                                           strict=True)]))


def drift(reference: Dict[str, np.ndarray], candidate: Dict[str, np.ndarray], atol: float,
          rtol: float, topk_threshold: float) -> List[Drift]:
    """Per output: max abs/rel error; integer outputs exact, or top-k set agreement
    >= ``topk_threshold`` when that is below 1."""
    out = []
    for name in sorted(reference):
        r, g = np.asarray(reference[name]), np.asarray(candidate.get(name))
        changed = ("missing" if name not in candidate else
                   f"shape {list(r.shape)} -> {list(g.shape)}" if r.shape != g.shape else
                   f"dtype {r.dtype} -> {g.dtype}" if r.dtype != g.dtype else None)
        # A changed shape or dtype is a changed contract: drift too.
        c = compare.compare(r, g, atol, rtol, same_dtype=True)
        agreement, ok = None, c.ok
        if compare.is_exact_dtype(r.dtype) and c.max_abs != float("inf"):
            agreement = _topk_agreement(r, g)
            ok = c.ok or (topk_threshold < 1.0 and agreement >= topk_threshold)
        out.append(Drift(name, str(r.dtype), c.max_abs, c.max_rel, c.mismatches, agreement, ok,
                         compare.scale(r), changed))
    return out


@dataclasses.dataclass
class Servable:
    """A candidate as its runtime calls it: ``prepare`` turns numpy feeds into the
    runtime's own inputs once, outside the timed calls."""
    call: Callable
    prepare: Callable[[Dict[str, np.ndarray]], Dict]

    def outputs(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.call(**self.prepare(feeds)).items()}


def load_servable(saved_model_dir: str, flags: Sequence[str] = (),
                  session: Optional[Dict[str, int]] = None) -> Servable:
    """The serving_default a TF Serving started with ``flags`` would run; with
    ``session`` (``{"intra_op": n, "inter_op": m}``), run as the server runs it: a
    TF1 Session::Run with those thread settings (:func:`session_servable`)."""
    import tensorflow as tf

    if session is not None and TFLITE_FLAG not in flags:
        return session_servable(saved_model_dir, session["intra_op"], session["inter_op"])

    if TFLITE_FLAG in flags:
        # TF Serving's TfLiteSession runs each interpreter on one thread, with
        # BuiltinOpResolver's kernels; no delegate, so what is timed and drift-checked
        # here is the floor of what the server runs.
        interpreter = tf.lite.Interpreter(
            model_path=os.path.join(saved_model_dir, TFLITE_FILE), num_threads=1,
            experimental_op_resolver_type=(
                tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
        runner = interpreter.get_signature_runner(SERVING_SIGNATURE)
        return Servable(runner, lambda feeds: {k: np.ascontiguousarray(v)
                                               for k, v in feeds.items()})
    return tf_servable(tf.saved_model.load(saved_model_dir).signatures[SERVING_SIGNATURE])


def session_servable(saved_model_dir: str, intra_op: int, inter_op: int) -> Servable:
    """serving_default through Session::Run of the loaded MetaGraph, as TF Serving runs
    it, in a session of ``intra_op`` / ``inter_op`` threads (a negative ``inter_op``:
    every node of a call in the calling thread). Sessions in one process that use a
    pool share TF's global inter-op pool, sized by the first."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra_op,
                                          inter_op_parallelism_threads=inter_op)
        sess = tf.compat.v1.Session(graph=graph, config=config)
        meta = tf.compat.v1.saved_model.loader.load(
            sess, [tf.saved_model.SERVING], saved_model_dir)
    signature = meta.signature_def[SERVING_SIGNATURE]
    inputs, outputs = sorted(signature.inputs), sorted(signature.outputs)
    run = sess.make_callable([signature.outputs[k].name for k in outputs],
                             [signature.inputs[k].name for k in inputs])

    def call(**feeds):
        return dict(zip(outputs, run(*[feeds[k] for k in inputs]), strict=True))
    return Servable(call, lambda feeds: {k: np.asarray(feeds[k]) for k in inputs})


def tf_servable(fn) -> Servable:
    """A TF signature function, fed tf.constants made once outside the timed calls."""
    import tensorflow as tf

    return Servable(fn, lambda feeds: {k: tf.constant(v) for k, v in feeds.items()})
