"""TF Serving's session threads: the flags, the cores a process may use, and the
inter-op value that runs a call's nodes in the thread that called.

TF Serving gives its session ``--tensorflow_intra_op_parallelism`` and
``--tensorflow_inter_op_parallelism`` as they are whenever one of them is positive
(model_servers/server.cc). TF's DirectSession runs every node of a call in the
calling thread when ``inter_op_parallelism_threads`` is negative (direct_session.cc):
no hand-off to an inter-op pool per node, which on small graphs is most of a call
(docs/BENCHMARKS.md), at the price of no overlap between independent branches. The
optimizer measures which one a model serves faster with; the pusher writes it.

    >>> session_flags(2, CALLER_THREAD)
    ['--tensorflow_intra_op_parallelism=2', '--tensorflow_inter_op_parallelism=-1']
"""
from __future__ import annotations

import os
from typing import List

SESSION_FLAGS = ("tensorflow_intra_op_parallelism", "tensorflow_inter_op_parallelism")
CALLER_THREAD = -1  # inter-op: each call's nodes run in the thread that called


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container's cpuset
    sets it), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity API (macOS)
        return max(1, os.cpu_count() or 1)


def session_flags(intra_op: int, inter_op: int) -> List[str]:
    """TF Serving's flags for a session of ``intra_op`` / ``inter_op`` threads."""
    return [f"--{SESSION_FLAGS[0]}={intra_op}", f"--{SESSION_FLAGS[1]}={inter_op}"]


__all__ = ["CALLER_THREAD", "SESSION_FLAGS", "session_flags", "usable_cores"]
