"""The CPU allocator's environment: BFC's arena capped below the memory limit, and a
fresh TensorFlow process that runs with the variables really using (and capping) it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tfx_bridge import cpu_allocator

# Runs in a fresh process: TensorFlow reads the allocator variables once, at start.
_PROBE = """
import tensorflow as tf
x = tf.matmul(tf.ones([64, 64]), tf.ones([64, 64]))
try:
    print("stats", tf.config.experimental.get_memory_info("CPU:0")["peak"] > 0)
except ValueError:
    print("stats none")
try:
    tf.zeros([{rows}, 1024, 1024])
    print("big ok")
except tf.errors.ResourceExhaustedError:
    print("big refused")
"""


def _probe(env: dict, rows: int) -> str:
    base = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0",
            "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", _PROBE.format(rows=rows)], env={**base, **env},
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    return " ".join(line for line in out.stdout.splitlines() if line.startswith(("stats", "big")))


def test_allocator_env_bfc_arena_capped_at_share_of_memory_limit():
    env = cpu_allocator.allocator_env(cpu_allocator.BFC, memory_limit_mb=1000)
    assert env == {cpu_allocator.USE_BFC_VAR: "true", cpu_allocator.BFC_LIMIT_VAR: "875"}
    assert cpu_allocator.allocator_env(cpu_allocator.BFC) == {cpu_allocator.USE_BFC_VAR: "true"}


def test_allocator_env_unknown_allocator_refused():
    with pytest.raises(ValueError, match="use one of"):
        cpu_allocator.allocator_env("tcmalloc")


def test_allocator_env_bfc_in_fresh_tensorflow_arena_used_and_capped():
    # A 63 MiB cap (73 x ARENA_SHARE): a 400 MiB tensor is refused by TF, not by the
    # machine.
    env = cpu_allocator.allocator_env(cpu_allocator.BFC, memory_limit_mb=73)
    assert _probe(env, rows=100) == "stats True big refused"


def test_allocator_env_malloc_in_fresh_tensorflow_default_allocator():
    assert _probe(cpu_allocator.allocator_env(cpu_allocator.MALLOC), rows=100) == \
        "stats none big ok"
