"""tfx_bridge.child: the marker line, a child's crash, its stderr tail."""
from __future__ import annotations

from tfx_bridge import child


def test_run_python_marker_line_last_wins_json_decoded():
    result = child.run_python(
        ["-c", "print('noise'); print('OUT {\"a\": 1}'); print('OUT [2]')"], "OUT ", timeout=60)
    assert result.returncode == 0 and result.payload == [2]
    assert result.stderr_tail == "no output"


def test_run_python_aborted_child_reported_with_stderr_tail():
    result = child.run_python(
        ["-c", "import os, sys; print('died here', file=sys.stderr, flush=True); os.abort()"],
        "OUT ", timeout=60)
    assert result.returncode != 0 and result.payload is None
    assert result.stderr_tail == "died here"
