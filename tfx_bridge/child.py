"""Python in a child process, for work that can abort or crash its process
(TensorRT probes, TF-TRT and TFLite converters, loading an untrusted SavedModel):
a crash there is reported, never inherited. No TFX imports.

The child prints one line ``<marker><json>`` on stdout; everything else it
prints is ignored, and the last stderr line is kept for error messages.

Example:
  >>> from tfx_bridge import child
  >>> child.run_python(["-c", "print('OUT ' + '[1, 2]')"], "OUT ", timeout=60).payload
  [1, 2]
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any, Optional, Sequence


@dataclasses.dataclass
class ChildResult:
    returncode: int
    payload: Optional[Any]  # the JSON after the marker; None when the child printed none
    stderr_tail: str  # the last stderr line, or "no output"


def run_python(args: Sequence[str], marker: str, timeout: float) -> ChildResult:
    """Runs ``python <args>`` with TF's C++ logging quieted (only the last stderr line
    is kept, and it should be the error). Raises subprocess.TimeoutExpired."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(marker)),
                None)
    return ChildResult(proc.returncode,
                       None if line is None else json.loads(line[len(marker):]),
                       (proc.stderr.strip().splitlines() or ["no output"])[-1])
