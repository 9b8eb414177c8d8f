"""Hostile inputs through the CLI in a child process: a hang or a crash shows
as a timeout or a signal, not as a stuck test run."""
from __future__ import annotations

import os
import subprocess
import sys


def _cli(*args, timeout=120):
    code = f"from tfx_bridge import cli; raise SystemExit(cli.main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)


def test_ingest_fifo_refused_not_hung(tmp_path):
    base = tmp_path / "in"
    base.mkdir()
    os.mkfifo(base / "x.parquet")  # opening it for reading would block forever
    proc = _cli("ingest", "--input-base", str(base), "--output", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert ("Not regular files: ['x.parquet'] (a FIFO, socket or device matched "
            "'*.parquet')") in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
