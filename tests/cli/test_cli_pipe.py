"""``tfx-bridge ... | head``: a reader that leaves early ends the verb quietly."""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def test_cli_ingest_into_a_closed_pipe_exits_141_quietly(tmp_path):
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": list(range(50))}), str(tmp_path / "in" / "d.parquet"))
    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    proc = subprocess.run([exe, "ingest", "--input-base", str(tmp_path / "in"), "--output",
                           str(tmp_path / "out")], stdout=write, stderr=subprocess.PIPE,
                          text=True, timeout=300)
    os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "check failed" not in proc.stderr
    assert "Exception ignored" not in proc.stderr and "internal error" not in proc.stderr
    assert (tmp_path / "out" / "Split-train").is_dir()  # the work itself was done
