"""Budget sizing: rounds and calls planned from a calibration call, timed on a fake
clock (no real time is measured, so no figure here depends on the host)."""
from __future__ import annotations

from tfx_bridge.components.trt_optimizer import measure


class FakeClock:
    """A clock only the fake model's calls move."""

    def __init__(self):
        self.now = 0.0
        self.calls = 0

    def __call__(self) -> float:
        return self.now

    def model(self, seconds: float):
        def call(**feeds):
            self.calls += 1
            self.now += seconds
        return call


def test_plan_rounds_slow_call_fewer_calls_bounded():
    plans = measure.plan_rounds({1: 0.001, 32: 5.0}, budget_s=60.0, iterations=100,
                                min_rounds=5)
    fast, slow = plans[1], plans[32]
    assert fast.rounds == measure.TARGET_ROUNDS and fast.calls <= 100
    assert slow.per_round == 1 and 5 <= slow.rounds < fast.rounds
    assert fast.calls * 0.001 + slow.calls * 5.0 <= 60.0


def test_plan_rounds_call_past_budget_min_rounds_only():
    plans = measure.plan_rounds({1: 30.0, 32: 300.0}, budget_s=60.0, iterations=100,
                                min_rounds=7)
    assert plans[1] == measure.Plan(7, 1) and plans[32] == measure.Plan(7, 1)


def test_plan_rounds_fast_call_capped_by_iterations():
    plans = measure.plan_rounds({1: 1e-5, 32: 1e-4}, budget_s=600.0, iterations=50,
                                min_rounds=5)
    assert all(p.calls <= 50 and p.rounds == measure.TARGET_ROUNDS for p in plans.values())


def test_plan_rounds_budget_left_by_cheap_batch_goes_to_costly_one():
    alone = measure.plan_rounds({32: 1.0}, budget_s=30.0, iterations=100, min_rounds=5)
    shared = measure.plan_rounds({1: 1e-4, 32: 1.0}, budget_s=60.0, iterations=100,
                                 min_rounds=5)
    assert shared[32].calls > alone[32].calls


def test_measure_budgeted_slow_fake_call_fewer_calls_within_bound():
    fast, slow = FakeClock(), FakeClock()
    feeds = {"x": _Array(1)}
    for clock, seconds in ((fast, 0.001), (slow, 2.0)):
        calls = {1: {"original": (clock.model(seconds), feeds),
                     "frozen": (clock.model(seconds * 0.8), feeds)}}
        timed, info = measure.measure_budgeted(calls, budget_s=60.0, iterations=100,
                                               min_rounds=5, clock=clock)
        assert len(timed[1]["original"].rounds_ms) == info["plan"]["1"]["rounds"]
        assert timed[1]["frozen"].calls == timed[1]["original"].calls
    assert slow.calls < fast.calls
    # Calibration (first call + warm-up) then min_rounds x 2 models at worst.
    assert slow.now <= 60.0 + 2 * 2.0 * (1 + 10)


def test_measure_rounds_rotates_order_and_keeps_round_medians():
    clock, order = FakeClock(), []

    def model(name, seconds):
        def call(**feeds):
            order.append(name)
            clock.now += seconds
        return call

    feeds = {"x": _Array(4)}
    timed = measure.measure_rounds({"a": (model("a", 0.002), feeds),
                                    "b": (model("b", 0.001), feeds)}, rounds=3, per_round=2,
                                   clock=clock)
    assert order == ["a", "a", "b", "b", "b", "b", "a", "a", "a", "a", "b", "b"]
    assert timed["a"].rounds_ms == [2.0, 2.0, 2.0] and timed["b"].calls == 6
    assert timed["a"].batch == 4


def test_calibrate_slow_call_one_warmup_and_one_timed_call():
    clock = FakeClock()
    assert measure.calibrate(clock.model(5.0), {"x": _Array(1)}, seconds=1.0,
                             clock=clock) == 5.0
    assert clock.calls == 2
    fast = FakeClock()
    # 1/64 s a call: exact in binary, so the sums are too.
    assert measure.calibrate(fast.model(1 / 64), {"x": _Array(1)}, seconds=1.0, most=10,
                             clock=fast) == 1 / 64
    assert fast.calls == 11


def test_measure_budgeted_refused_candidate_dropped_from_larger_batches():
    clock = FakeClock()

    def calls(batch):
        feeds = {"x": _Array(batch)}
        return {"original": (clock.model(0.001 * batch), feeds),
                "frozen": (clock.model(0.001 * batch), feeds)}

    timed, info = measure.measure_budgeted({1: calls(1), 32: calls(32)}, budget_s=10.0,
                                           iterations=100, min_rounds=5, clock=clock,
                                           refuse=lambda lat: {"frozen"})
    assert sorted(timed[1]) == ["frozen", "original"] and sorted(timed[32]) == ["original"]
    # What is left alone is timed for the record only: one round.
    assert info["plan"]["32"]["rounds"] == 1 and info["plan"]["32"]["timed"] == ["original"]
    assert len(timed[32]["original"].rounds_ms) == 1


class _Array:
    def __init__(self, batch: int):
        self.shape = (batch,)


def test_time_in_child_string_feeds_reach_the_model_whole_without_pickle(tmp_path):
    """Raw-feature signatures take strings (the demo's country): the feeds file holds
    them as bytes and lengths, never pickled, and every value arrives whole."""
    import numpy as np
    import tensorflow as tf

    from tfx_bridge.components.trt_optimizer import measure_worker

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="country")])
        def serve(self, country):
            return {"n": tf.strings.length(country)}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "m"), signatures={"serving_default": m.serve})
    feeds = {1: {"country": np.array([b"de\x00"], object)},
             2: {"country": np.array(["fr", ""], object)}}
    latency, _ = measure_worker.time_in_child({"original": (str(tmp_path / "m"), [])}, feeds,
                                              budget_s=2.0, iterations=5, min_rounds=1,
                                              timeout_s=300)
    assert [lat.batch for lat in latency["original"]] == [1, 2]
    stored = measure_worker._without_objects({"k": feeds[1]["country"]})
    assert all(a.dtype != object for a in stored.values())
