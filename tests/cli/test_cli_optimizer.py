"""The optimizer's flags, refused while parsing when not finite or out of range, and
the run summary's optimizer line: a kept original says so with the reason, and a
slower "after" is never shown as the result."""
from __future__ import annotations

import pytest

from tfx_bridge import cli
from tfx_bridge.cli import run_env

REFUSED = ("kept the original: frozen at batch 32: ratio 1.043, bound 1.080 over 15 rounds, "
           "margin: median ratio 1.043 is above 0.95 (not 5% faster)")


def test_optimizer_line_original_kept_says_why_without_after():
    line = run_env.optimizer_line({"backend": "original", "latency_p50_ms_before": 0.794,
                                   "latency_p50_ms_after": 0.794, "serving_flags": "",
                                   "decision": REFUSED})
    assert line == f"Optimizer: {REFUSED}; p50 0.794 ms (largest batch)"
    assert "->" not in line


def test_optimizer_line_candidate_kept_before_after_and_reason():
    why = "kept frozen: at least 5% faster at every batch size beyond the rounds' spread"
    line = run_env.optimizer_line({"backend": "grappler-cpu", "latency_p50_ms_before": 0.8,
                                   "latency_p50_ms_after": 0.6, "serving_flags": "",
                                   "decision": why})
    assert line.startswith("Optimizer: backend grappler-cpu, p50 0.800 ms -> 0.600 ms "
                           "(largest batch, same-run interleaved medians); kept frozen")


def test_optimizer_line_artifact_without_decision_still_says_original_kept():
    line = run_env.optimizer_line({"backend": "original", "latency_p50_ms_before": 1.5,
                                   "latency_p50_ms_after": 1.5, "serving_flags": ""})
    assert line == "Optimizer: kept the original; p50 1.500 ms (largest batch)"


@pytest.mark.parametrize("flag, value, needle", [
    ("--time-budget", "nan", "not a finite number between 1 and 3600"),
    ("--time-budget", "inf", "not a finite number"),
    ("--time-budget", "0.5", "not a finite number between 1 and 3600"),
    ("--iterations", "5", "not between 10 and 100000"),
    ("--atol=-1e-4", None, "not a finite number between 0"),
    ("--topk-threshold", "nan", "not a finite number"),
])
def test_optimize_flag_out_of_range_refused_while_parsing(tmp_path, capsys, flag, value,
                                                         needle):
    given = [flag] if value is None else [flag, value]  # "--atol=-1e-4": not an option
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["optimize", "--model", str(tmp_path), "--output", str(tmp_path / "o"),
                  *given])
    assert exit_info.value.code == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"argument {flag.split('=')[0]}" in err and needle in err


@pytest.mark.parametrize("verb", ["demo", "run", "compile-kfp"])
def test_optimizer_iterations_below_minimum_refused_while_parsing(capsys, verb):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([verb, "--optimizer-iterations", "3"])
    assert exit_info.value.code == cli.EXIT_BAD_INPUT
    assert "argument --optimizer-iterations: 3 is not between 10" in capsys.readouterr().err
