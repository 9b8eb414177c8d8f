"""Exits by cause: what users, disks and signals do is exit 2 naming the path or flag,
found through the libraries' wrappers and checked before slow imports, never exit 3."""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfx_bridge import cli


def _exit_2(capfd, args, *needles) -> None:
    """``tfx-bridge ARGS`` in this process ends with exit 2, one message holding each
    of ``needles`` and no traceback."""
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse usage errors
        code = e.code
    err = capfd.readouterr().err
    assert code == cli.EXIT_BAD_INPUT and "Traceback" not in err, err
    assert "internal error" not in err and all(n in err for n in needles), err


def _data(tmp_path) -> str:
    os.makedirs(tmp_path / "in")
    pq.write_table(pa.table({"a": [1, 2, 3]}), str(tmp_path / "in" / "d.parquet"))
    return str(tmp_path / "in")


@pytest.mark.parametrize("verb, flag, value", [
    ("push", "--lock-timeout", "nan"), ("push", "--lock-timeout", "-5"),
    ("push", "--lock-timeout", "inf"), ("import-model", "--atol", "nan"),
    ("import-model", "--rtol", "-1")])
def test_cli_float_flag_not_finite_or_out_of_range_refused_while_parsing(capfd, tmp_path,
                                                                          verb, flag, value):
    required = {"push": ["--model", str(tmp_path), "--base-path", str(tmp_path / "b"),
                         "--model-name", "m"],
                "import-model": ["--onnx", str(tmp_path / "m.onnx"), "--output",
                                 str(tmp_path / "o")]}[verb]
    _exit_2(capfd, [verb, *required, flag, value], f"argument {flag}", value)


def test_cli_run_impossible_runner_preset_refused_before_tfx_loads(tmp_path):
    argv = ["run", "--workdir", str(tmp_path / "w"), "--data-root", str(tmp_path),
            "--serving-base-path", str(tmp_path / "s"), "--beam-runner", "flink",
            "--beam-arg=--flink_master=flink:8081", "--beam-arg=--flink_version=1.12"]
    code = ("import sys\nfrom tfx_bridge import cli\n"
            f"rc = cli.main({argv!r})\n"
            "print('RESULT', rc, 'tfx.orchestration' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.strip().splitlines()[-1] == "RESULT 2 False", proc.stderr[-2000:]
    assert "--flink_version 1.12 is not one" in proc.stderr


def test_cli_ingest_full_disk_rewrapped_by_beam_exit_2_naming_the_path(capfd, tmp_path,
                                                                       monkeypatch):
    from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core

    data = _data(tmp_path)

    def full_disk(plan, stage, *args, **kwargs):
        try:  # how Beam's background writer's failure reaches the caller
            raise OSError(28, "No space left on device", os.path.join(stage, "part-0"))
        except OSError as e:
            raise RuntimeError(f"{e} [while running 'WriteSplit']") from e

    monkeypatch.setattr(core, "ingest", full_disk)
    _exit_2(capfd, ["ingest", "--input-base", data, "--output", str(tmp_path / "out")],
            "No space left on device (ENOSPC)", str(tmp_path / "out"), "df -h")


def test_cli_ingest_output_removed_while_writing_exit_2_naming_it(capfd, tmp_path,
                                                                  monkeypatch):
    import shutil

    from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core

    data = _data(tmp_path)
    out = tmp_path / "out"

    def removed_meanwhile(plan, stage, *args, **kwargs):
        shutil.rmtree(out)  # what a user's rm -r does while the verb writes
        with open(os.path.join(stage, "part-0"), "wb"):
            pass

    monkeypatch.setattr(core, "ingest", removed_meanwhile)
    _exit_2(capfd, ["ingest", "--input-base", data, "--output", str(out)],
            "vanished while tfx-bridge ingest wrote there", "--output")
