"""TensorRT and GPU detection that cannot take the caller down.

TF 2.16's ``get_loaded_tensorrt_version()`` (also reached through
``is_loaded_tensorrt_version_greater_equal``) aborts the whole process when
libnvinfer is missing, and creating ``TrtGraphConverterV2`` then raises the
misleading "Tensorflow has not been built with TensorRT support". So the probe
runs in a subprocess, asks ``is_tensorrt_enabled()`` first, and reports what
it found as JSON; any crash of the child is a "no" with the reason.

No TFX imports.
"""
from __future__ import annotations

import dataclasses
import subprocess
from typing import Optional

from tfx_bridge import child

# Run as a child process: get_loaded_tensorrt_version() aborts a process without libnvinfer.
PROBE_MODULE = "tfx_bridge.components.trt_optimizer.trt_probe"



@dataclasses.dataclass(frozen=True)
class Probe:
    """What the host can run."""

    tensorrt: bool
    gpus: int
    linked_version: Optional[str]
    loaded_version: Optional[str]
    reason: str

    @property
    def can_run_tensorrt(self) -> bool:
        return self.tensorrt and self.gpus > 0

    def why_not(self) -> str:
        if self.can_run_tensorrt:
            return ""
        if not self.tensorrt:
            return self.reason or "TensorRT is not available"
        return "TensorRT is available but no GPU is visible"


_FOUND: Optional[Probe] = None


def probe(timeout_s: int = 300) -> Probe:
    """Runs the probe in a child process; a crash there is reported, never inherited.

    An answer the child gave is kept for the life of this process (the host's
    TensorRT libraries and GPUs do not change under it; each probe costs a
    TensorFlow start-up, ~5 s, per optimizer run in a LocalDagRunner process);
    a timeout or a crash is not kept, so the next run asks again.
    """
    global _FOUND
    if _FOUND is not None:
        return _FOUND
    try:
        # In a warm worker (the pusher's load check reuses it): an abort there kills
        # only the worker, reported below like any crash of a fresh child.
        result = child.run_python(["-m", PROBE_MODULE], "TRT_PROBE ", timeout=timeout_s,
                                  env=child.warm_env(), warm=True)
    except subprocess.TimeoutExpired:
        return Probe(False, 0, None, None, f"the TensorRT probe timed out after {timeout_s}s")
    found = result.payload
    if result.returncode != 0 or found is None:
        return Probe(False, 0, None, None, f"the TensorRT probe died (exit "
                     f"{result.returncode}): {result.stderr_tail}")
    _FOUND = Probe(found["tensorrt"], int(found["gpus"]), found["linked"], found["loaded"],
                   found["reason"])
    return _FOUND
