"""Hostile inputs through the CLI in a child process: a hang or a crash shows
as a timeout or a signal, not as a stuck test run."""
from __future__ import annotations

import os


def test_ingest_fifo_refused_not_hung(tmp_path, cli_in_child):
    base = tmp_path / "in"
    base.mkdir()
    os.mkfifo(base / "x.parquet")  # opening it for reading would block forever
    proc = cli_in_child("ingest", "--input-base", str(base), "--output",
                        str(tmp_path / "out"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert ("Not regular files: ['x.parquet'] (a FIFO, socket or device matched "
            "'*.parquet')") in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
