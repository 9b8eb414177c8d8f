"""Measuring candidates: latency (interleaved rounds, one process), drift against
the original, and servables loaded as TF Serving would load them."""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Dict, List, Sequence

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


def measure(fn: Callable, feeds: Dict, iterations: int, warmup: int = 10) -> Latency:
    """p50/p99 of wall time per call, after warm-up (XLA compiles in the warm-up)."""
    return measure_interleaved({"": (fn, feeds)}, iterations, rounds=1, warmup=warmup)[""]


def measure_interleaved(calls: Dict[str, tuple], iterations: int, rounds: int = 10,
                        warmup: int = 10) -> Dict[str, Latency]:
    """``measure`` for several ``name: (fn, feeds)`` at once, in interleaved rounds, so
    a noisy moment on a shared host lands on every candidate, not on one."""
    times: Dict[str, List[float]] = {name: [] for name in calls}
    for fn, feeds in calls.values():
        for _ in range(warmup):
            fn(**feeds)
    per_round = max(1, iterations // rounds)
    order = list(calls)
    for r in range(rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            fn, feeds = calls[name]
            for _ in range(per_round):
                start = time.perf_counter()
                fn(**feeds)
                times[name].append(time.perf_counter() - start)
    out = {}
    for name, (_, feeds) in calls.items():
        batch = int(next(iter(feeds.values())).shape[0])
        out[name] = Latency(batch, float(np.percentile(times[name], 50) * 1e3),
                            float(np.percentile(times[name], 99) * 1e3))
    return out


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
        # A changed shape or dtype is a changed contract: drift too.
        c = compare.compare(r, g, atol, rtol, same_dtype=True)
        agreement, ok = None, c.ok
        if compare.is_exact_dtype(r.dtype) and c.max_abs != float("inf"):
            agreement = _topk_agreement(r, g)
            ok = c.ok or (topk_threshold < 1.0 and agreement >= topk_threshold)
        out.append(Drift(name, str(r.dtype), c.max_abs, c.max_rel, c.mismatches, agreement, ok))
    return out


@dataclasses.dataclass
class Servable:
    """A candidate as its runtime calls it: ``prepare`` turns numpy feeds into the
    runtime's own inputs once, outside the timed calls."""
    call: Callable
    prepare: Callable[[Dict[str, np.ndarray]], Dict]

    def outputs(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.call(**self.prepare(feeds)).items()}


def load_servable(saved_model_dir: str, flags: Sequence[str] = ()) -> Servable:
    """The serving_default a TF Serving started with ``flags`` would run."""
    import tensorflow as tf

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


def tf_servable(fn) -> Servable:
    """A TF signature function, fed tf.constants made once outside the timed calls."""
    import tensorflow as tf

    return Servable(fn, lambda feeds: {k: tf.constant(v) for k, v in feeds.items()})
