"""What ``run`` and ``demo`` settle before any pipeline work: one run at a time (a
workdir or served model another run holds: exit 4 naming the holder; a dead holder's
lock taken over and said so), and folders that cannot work (exit 2)."""
from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfx_bridge import cli
from tfx_bridge.runlock import LOCK_FILE, model_lock_name


def _main(capfd, *args):
    code = cli.main(list(args))
    out, err = capfd.readouterr()
    return code, out, err


def _run_args(tmp_path):
    (tmp_path / "data" / "span-1").mkdir(parents=True)
    pq.write_table(pa.table({"a": [1, 2]}), str(tmp_path / "data" / "span-1" / "p.parquet"))
    return ["run", "--data-root", str(tmp_path / "data"), "--serving-base-path",
            str(tmp_path / "serving"), "--workdir", str(tmp_path / "work")]


@pytest.mark.parametrize("held", ["work", "serving"])
def test_cli_run_while_another_run_holds_workdir_or_model_exit_4_naming_it(tmp_path, capfd,
                                                                          hold_run_lock, held):
    proc = hold_run_lock(tmp_path / held,
                         LOCK_FILE if held == "work" else model_lock_name("ctr"))
    import tfx_bridge.pipelines.runner  # noqa: F401  (imports are not the pipeline's work)
    start = time.monotonic()
    code, _, err = _main(capfd, *_run_args(tmp_path), "--json")
    assert code == cli.EXIT_BUSY, err
    assert f"pid {proc.pid}" in err and "tfx-bridge run (the 02:00 cron)" in err, err
    assert "--lock-timeout" in err and "Traceback" not in err
    assert time.monotonic() - start < 20  # refused before any pipeline work


@pytest.mark.parametrize("verb", ["run", "demo"])
def test_cli_busy_workdir_refused_before_the_imports_exit_4(tmp_path, capfd, hold_run_lock,
                                                            verb):
    """A scheduled run that finds the last one still going ends at once: the refusal
    comes before the slow imports are announced."""
    proc = hold_run_lock(tmp_path / "work", LOCK_FILE)
    args = _run_args(tmp_path) if verb == "run" else ["demo", "--workdir",
                                                      str(tmp_path / "work")]
    code, _, err = _main(capfd, *args)
    assert code == cli.EXIT_BUSY, err
    assert f"pid {proc.pid}" in err and "Not waiting for it" in err, err
    assert "Loading TFX" not in err and "Traceback" not in err, err


def test_cli_run_lock_left_by_a_dead_run_taken_over_and_said(tmp_path, capfd):
    (tmp_path / "work").mkdir()
    dead = {"pid": 999_999_999, "host": "cron-host", "started": "2026-12-01T02:00:00+00:00",
            "command": "tfx-bridge run --workdir work"}
    (tmp_path / "work" / LOCK_FILE).write_text(json.dumps(dead))
    # Past the lock, the missing trainer module is refused (exit 2): nothing else runs.
    code, _, err = _main(capfd, *_run_args(tmp_path), "--trainer-module",
                         str(tmp_path / "missing.py"))
    assert "Took over the run lock of this workdir from a run that died holding it (pid " \
           "999999999 on cron-host, started 2026-12-01T02:00:00+00:00" in err, err
    assert code == cli.EXIT_BAD_INPUT
    assert (tmp_path / "work" / LOCK_FILE).read_text() == ""  # released, holder cleared


def test_cli_demo_workdir_that_is_a_file_refused_exit_2(tmp_path, capfd):
    (tmp_path / "f").write_text("x")
    code, _, err = _main(capfd, "demo", "--workdir", str(tmp_path / "f"))
    assert code == cli.EXIT_BAD_INPUT, err
    assert f"{tmp_path / 'f'} is a file, not a folder" in err and "Traceback" not in err
    assert os.path.isfile(tmp_path / "f")


def test_cli_demo_object_root_not_a_uri_refused_exit_2(tmp_path, capfd):
    code, _, err = _main(capfd, "demo", "--workdir", str(tmp_path / "w"), "--object-root",
                         str(tmp_path / "store"))
    assert code == cli.EXIT_BAD_INPUT, err
    assert "is not a URI: give s3://bucket/prefix" in err
    assert not (tmp_path / "store").exists() and not (tmp_path / "w").exists()


def test_cli_run_quiet_prints_no_progress_only_the_refusal(tmp_path, capfd):
    code, _, err = _main(capfd, *_run_args(tmp_path), "--trainer-module",
                         str(tmp_path / "missing.py"), "--quiet")
    assert code == cli.EXIT_BAD_INPUT
    assert err.strip().splitlines() == [
        f"tfx-bridge run: --trainer-module {tmp_path / 'missing.py'}: no such file. Give a "
        ".py module file that exists, or a dotted path pkg.module.function."]


def test_cli_run_says_it_is_loading_before_the_slow_imports(tmp_path, capfd):
    _, _, err = _main(capfd, *_run_args(tmp_path), "--trainer-module",
                      str(tmp_path / "missing.py"))
    assert err.splitlines()[0].startswith("Loading TFX, TensorFlow and Beam")


@pytest.mark.parametrize("value", ["nan", "-1", "inf", "soon"])
def test_cli_run_lock_timeout_not_a_finite_number_of_seconds_usage_error(tmp_path, capfd,
                                                                         value):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*_run_args(tmp_path), "--lock-timeout", value])
    assert exit_info.value.code == cli.EXIT_BAD_INPUT
    assert f"{value!r} is not a number of seconds >= 0" in capfd.readouterr().err


@pytest.mark.parametrize("verb", ["run", "demo", "compile-kfp"])
def test_cli_pipeline_verbs_defaults_are_the_pipeline_configs(tmp_path, verb):
    from tfx_bridge.cli.main import build_parser
    from tfx_bridge.pipelines.config import PipelineConfig

    argv = {"run": _run_args(tmp_path), "demo": ["demo"],
            "compile-kfp": ["compile-kfp", "--output", "p.json", "--pipeline-root", "s3://b/r",
                            "--data-root", "s3://b/d", "--image", "i"]}[verb]
    args = build_parser().parse_args(argv)
    defaults = PipelineConfig.defaults()
    assert args.train_steps == defaults.train_steps
    assert args.optimizer_iterations == defaults.optimizer_iterations
    if verb != "compile-kfp":
        assert args.lock_timeout == defaults.lock_timeout_s
    if verb == "run":
        assert args.model_name == defaults.model_name
