"""TF Serving's session threads for the kept model: Session::Run servables in both
thread modes compute what the signature computes; the calling thread is recommended
only by the candidates' rule; a failed measurement is recorded, never raised."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402

from tfx_bridge.components.trt_optimizer import (  # noqa: E402
    measure,
    measure_worker,
    session_threads,
)
from tfx_bridge.components.trt_optimizer.errors import OptimizerError  # noqa: E402
from tfx_bridge.components.trt_optimizer.results import Latency  # noqa: E402
from tfx_bridge.serving_threads import CALLER_THREAD  # noqa: E402


@pytest.fixture(scope="module")
def moe_dir(reference_imports):
    return reference_imports["moe"].serving_dir


@pytest.mark.parametrize("inter_op", [2, CALLER_THREAD])
def test_session_servable_both_thread_modes_match_signature_call(moe_dir, inter_op):
    feeds = {"x": np.random.default_rng(3).uniform(-1, 1, (5, 16)).astype(np.float32)}
    expected = measure.tf_servable(
        tf.saved_model.load(moe_dir).signatures["serving_default"]).outputs(feeds)
    got = measure.load_servable(moe_dir, [], {"intra_op": 2, "inter_op": inter_op}
                                ).outputs(feeds)
    assert sorted(got) == sorted(expected)
    np.testing.assert_array_equal(got["experts"], expected["experts"])
    np.testing.assert_allclose(got["score"], expected["score"], atol=1e-6)


def _latencies(pool_ms, caller_ms, rounds=7):
    return {session_threads.POOL: [Latency(b, p, p, [p] * rounds, rounds)
                                   for b, p in pool_ms.items()],
            session_threads.CALLER: [Latency(b, p, p, [p] * rounds, rounds)
                                     for b, p in caller_ms.items()]}


def _feeds(*batches):
    return {b: {"x": np.zeros((b, 16), np.float32)} for b in batches}


def test_measure_session_calling_thread_faster_at_every_batch_recommended(monkeypatch):
    seen = {}

    def timed(folders, feeds, budget_s, *args, **kwargs):
        seen.update(folders=folders, budget=budget_s)
        return _latencies({1: 0.30, 32: 0.40}, {1: 0.15, 32: 0.30}), {"seconds": 1.0}
    monkeypatch.setattr(measure_worker, "time_in_child", timed)
    session = session_threads.measure_session("/m", _feeds(1, 32), 20.0, 100, cores=2)
    assert session["inter_op_parallelism"] == CALLER_THREAD and session["cores"] == 2
    assert "--tensorflow_inter_op_parallelism=-1" in session["reason"]
    assert "batch 1 ratio 0.500" in session["reason"]
    # Both sessions on the same folder; the pool's loaded first (it sizes TF's pool).
    assert list(seen["folders"]) == [session_threads.POOL, session_threads.CALLER]
    assert seen["folders"][session_threads.CALLER][2] == {"intra_op": 2,
                                                          "inter_op": CALLER_THREAD}
    assert seen["budget"] == 20.0 * session_threads.BUDGET_SHARE


def test_measure_session_slower_at_one_batch_pool_kept_naming_it(monkeypatch):
    monkeypatch.setattr(measure_worker, "time_in_child", lambda *a, **k: (
        _latencies({1: 0.30, 32: 10.0}, {1: 0.15, 32: 10.2}), {}))
    session = session_threads.measure_session("/m", _feeds(1, 32), 20.0, 100, cores=2)
    assert session["inter_op_parallelism"] is None
    assert "pool of 2 threads kept" in session["reason"] and "batch 32" in session["reason"]
    assert [s["refused"] is None for s in session["speedup"]] == [True, False]


def test_measure_session_failed_child_recorded_pool_kept(monkeypatch):
    def broken(*args, **kwargs):
        raise OptimizerError("timing the candidates in a child process failed (exit 1)")
    monkeypatch.setattr(measure_worker, "time_in_child", broken)
    session = session_threads.measure_session("/m", _feeds(1), 20.0, 100, cores=4)
    assert session["inter_op_parallelism"] is None
    assert session["reason"].startswith("not measured (") and "pool of 4" in session["reason"]


@pytest.mark.slow
def test_measure_session_real_child_decision_matches_its_figures(moe_dir):
    session = session_threads.measure_session(
        moe_dir, _feeds(1, 8), time_budget_s=8.0, iterations=40, cores=2)
    assert session["timing"]["onednn"] == "0", session
    speedups = session["speedup"]
    passed = len(speedups) == 2 and all(s["refused"] is None for s in speedups)
    assert (session["inter_op_parallelism"] == CALLER_THREAD) == passed
    assert os.path.isdir(moe_dir)  # measured in place, nothing moved
