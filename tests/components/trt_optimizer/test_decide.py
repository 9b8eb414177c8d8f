"""The choice rule on injected per-round latencies: a candidate replaces the original
only when at least 5% faster at every batch size beyond the rounds' spread; the
report and its note say why the original was kept."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tfx_bridge.components.trt_optimizer import decide, report, results
from tfx_bridge.components.trt_optimizer.detect import Probe

ROUNDS = 15
NO_TRT = Probe(False, 0, "8.6.1", None, "libnvinfer.so.8.6.1 not found")


def _timed(name, ratios_by_batch, ok=True, seed=0):
    """A candidate whose round medians are the original's (1.0 ms at batch 1, 4.0 ms
    at batch 32, each round +-1%) times the given per-round ratios."""
    rng = np.random.default_rng(seed)
    r = results.CandidateResult(name, name, [])
    for batch, ratios in ratios_by_batch.items():
        base = 1.0 if batch == 1 else 4.0
        rounds = [base * q * (1 + rng.uniform(-0.01, 0.01)) for q in ratios]
        r.latency.append(results.Latency(batch, float(np.median(rounds)), max(rounds), rounds,
                                         len(rounds)))
    r.drift = [results.Drift("y", "float32", 0.0, 0.0, 0, None, ok)]
    return r


def _original():
    return _timed("original", {1: [1.0] * ROUNDS, 32: [1.0] * ROUNDS}, seed=1)


def _decided(*candidates):
    runs = [_original(), *candidates]
    decide.judge(runs)
    return decide.choose(runs, trt=False)


def test_choose_candidate_3_percent_faster_keeps_original():
    kept, why = _decided(_timed("frozen", {1: [0.97] * ROUNDS, 32: [0.97] * ROUNDS}))
    assert kept.name == "original"
    assert why.startswith("kept the original: frozen at batch 1: ratio 0.9")
    assert "margin: median ratio" in why and "not 5% faster" in why


def test_choose_faster_at_one_batch_slower_at_another_keeps_original():
    frozen = _timed("frozen", {1: [0.90] * ROUNDS, 32: [1.02] * ROUNDS})
    kept, why = _decided(frozen)
    assert kept.name == "original"
    by_batch = {s.batch: s for s in frozen.speedup}
    assert by_batch[1].refused is None and by_batch[32].refused.startswith("margin")
    assert "frozen at batch 32" in why


def test_choose_consistently_20_percent_faster_small_spread_keeps_candidate():
    frozen = _timed("frozen", {1: [0.80] * ROUNDS, 32: [0.80] * ROUNDS})
    kept, why = _decided(frozen)
    assert kept.name == "frozen"
    assert why.startswith("kept frozen: at least 5% faster at every batch size")
    assert all(s.bound <= decide.MARGIN and s.rounds == ROUNDS for s in frozen.speedup)


def test_choose_large_spread_keeps_original():
    # The median round is 20% faster, but a third of the rounds are 10% slower: the
    # sign test's bound on the median lands on one of them.
    spread = [0.8] * 10 + [1.1] * 5
    frozen = _timed("frozen", {1: spread, 32: spread})
    kept, why = _decided(frozen)
    assert kept.name == "original"
    assert all(s.ratio < decide.MARGIN and s.bound > 1.0 for s in frozen.speedup)
    assert "spread: the rounds' 95.0% upper bound" in why


def test_choose_fastest_passing_candidate_drifted_one_refused():
    wrong = _timed("fast-wrong", {1: [0.1] * ROUNDS, 32: [0.1] * ROUNDS}, ok=False)
    tflite = _timed("tflite", {1: [0.5] * ROUNDS, 32: [0.7] * ROUNDS})
    xla = _timed("xla-cpu", {1: [0.6] * ROUNDS, 32: [0.8] * ROUNDS})
    kept, _ = _decided(wrong, tflite, xla)
    assert kept.name == "tflite" and wrong.speedup == []


def test_judge_alpha_shared_among_candidates_needs_more_rounds():
    # Five rounds bound the median at alpha 0.05 for one candidate, not at 0.025 each
    # for two.
    one = _timed("frozen", {1: [0.8] * 5, 32: [0.8] * 5})
    runs = [_timed("original", {1: [1.0] * 5, 32: [1.0] * 5}), one]
    decide.judge(runs)
    assert all(s.refused is None for s in one.speedup)
    two = [_timed("original", {1: [1.0] * 5, 32: [1.0] * 5}),
           _timed("frozen", {1: [0.8] * 5, 32: [0.8] * 5}),
           _timed("tflite", {1: [0.8] * 5, 32: [0.8] * 5})]
    decide.judge(two)
    assert all(s.refused.startswith("spread: 5 rounds give no bound")
               for r in two[1:] for s in r.speedup)


def test_choose_candidate_untimed_at_larger_batch_keeps_original():
    frozen = _timed("frozen", {1: [0.97] * ROUNDS})  # refused at batch 1, then dropped
    kept, why = _decided(frozen)
    assert kept.name == "original" and [s.batch for s in frozen.speedup] == [1]
    assert "frozen at batch 1" in why


@pytest.mark.parametrize("n, alpha", [(5, 0.05), (10, 0.05), (15, 0.05), (20, 0.01)])
def test_upper_rank_binomial_tail_at_least_confidence(n, alpha):
    k = decide.upper_rank(n, alpha)
    tail = sum(math.comb(n, i) for i in range(k)) / 2 ** n  # P(Binomial(n, 1/2) <= k - 1)
    below = sum(math.comb(n, i) for i in range(k - 1)) / 2 ** n
    assert tail >= 1 - alpha > below
    assert decide.upper_rank(decide.min_rounds(alpha), alpha) is not None
    assert decide.upper_rank(decide.min_rounds(alpha) - 1, alpha) is None


def test_report_original_kept_says_why_with_figures(tmp_path):
    frozen = _timed("frozen", {1: [0.97] * ROUNDS})  # refused at batch 1: not timed at 32
    runs = [_original(), frozen]
    decide.judge(runs)
    kept, why = decide.choose(runs, trt=False)
    timing = {"budget_s": 60.0, "seconds": 12.5, "calibration_s": 1.0, "onednn": "0",
              "plan": {"1": {"rounds": ROUNDS, "calls_per_round": 6, "call_s": 0.002},
                       "32": {"rounds": ROUNDS, "calls_per_round": 2, "call_s": 0.008}}}
    built = report.build_report(runs, kept, NO_TRT, "fp32", (1, 32), 1e-4, 0.0, 1.0, 20.0,
                                True, why, timing)
    assert built["latency_before_ms"] == built["latency_after_ms"]
    assert built["decision"]["kept"] == "original" and built["decision"]["reason"] == why
    note = built["serving_notes"][-1]
    assert note.startswith("Kept the original SavedModel (candidates tried: frozen): frozen at "
                           "batch 1: ratio 0.9")
    report.write_report(str(tmp_path), built, runs)
    text = (tmp_path / results.REPORT_MD).read_text()
    assert f"Decision: {why}." in text
    assert "| frozen | 1 | 0.9" in text and "oneDNN off, as stock TF Serving" in text
    row = next(line for line in text.splitlines() if line.startswith("| frozen | frozen |"))
    assert "| - | - | yes |" in row  # batch 32's cells: not timed
    assert (tmp_path / results.REPORT_PNG).stat().st_size > 0


def test_choose_drifted_only_candidate_reason_names_each_output_once_with_its_worst_errors():
    drifted = _timed("frozen", {1: [0.5] * ROUNDS, 32: [0.5] * ROUNDS}, ok=False)
    nan, inf = float("nan"), float("inf")
    drifted.drift = [results.Drift("logits", "float32", 2e-4, 1e-6, 3, None, False, 180.0),
                     results.Drift("logits", "float32", 5.8e-4, 0.017, 9, None, False, 242.0),
                     results.Drift("probs", "float32", 0.0, 0.0, 0, None, True, 1.0),
                     results.Drift("ids", "int32", inf, inf, 4, None, False, None,
                                   "dtype int32 -> int64"),
                     results.Drift("score", "float32", nan, nan, 1, None, False, 3.0),
                     results.Drift("score", "float32", 0.5, 0.5, 1, None, False, 3.0),
                     results.Drift("top", "float32", inf, inf, 1, None, False, 9.0)]
    kept, why = _decided(drifted)
    assert kept.name == "original"
    assert why == ("kept the original: frozen drifted (logits: max abs 0.00058 on values "
                   "up to 242; ids: dtype int32 -> int64; score: NaN against a number; "
                   "top: an infinity against another value)")


def test_choose_drift_within_float32_rounding_at_its_scale_names_the_atol_that_passes():
    drifted = _timed("frozen", {1: [0.5] * ROUNDS, 32: [0.5] * ROUNDS}, ok=False)
    drifted.drift = [results.Drift("logits", "float32", 5.8e-4, 0.017, 9, None, False, 456.0)]
    _, why = _decided(drifted)
    assert why == ("kept the original: frozen drifted (logits: max abs 0.00058 on values up "
                   "to 456; float32 rounding at that scale: atol=0.002 passes it)")
