"""Forks of a process where TensorFlow ran: a fork copies TF's runtime but not its
threads, so TF ops in the child wait forever (a DataLoader worker started by fork
after the trainer's process ran TF), and so does the destructor of any TF object
the child inherited and then collects. The fork is noted as it happens
(:func:`forked_after_tf`, for the reader to refuse or avoid TF instead of hanging)
and the inherited objects are frozen, so the child's cycle collector never reaches
them. No TFX imports.

Example:
    >>> forked_after_tf()  # this process was not forked from one where TF ran
    False
"""
from __future__ import annotations

import gc
import os
import sys


def _tf_runtime_started() -> bool:
    """Whether TensorFlow's runtime (its eager context, with the thread pools that run
    ops) has started in this process; importing TensorFlow alone does not start it."""
    context = sys.modules.get("tensorflow.python.eager.context")
    found = context.context_safe() if context is not None else None
    return bool(getattr(found, "_initialized", False))


_FORKED_AFTER_TF = False
_FROZE_FOR_FORK = False  # this process froze its objects for a fork, to undo after it


def _before_fork() -> None:
    # Frozen from before the fork, so no collection in the at-fork hooks that run in
    # the child ahead of ours (they allocate) can reach the objects it inherits. An
    # application's own freeze is left alone (and not undone after).
    global _FROZE_FOR_FORK
    if _tf_runtime_started() and gc.get_freeze_count() == 0:
        gc.freeze()
        _FROZE_FOR_FORK = True


def _after_fork_in_parent() -> None:
    global _FROZE_FOR_FORK
    if _FROZE_FOR_FORK:
        _FROZE_FOR_FORK = False
        gc.unfreeze()


def _after_fork_in_child() -> None:
    global _FORKED_AFTER_TF, _FROZE_FOR_FORK
    _FROZE_FOR_FORK = False  # the child keeps its objects frozen
    if _tf_runtime_started():
        _FORKED_AFTER_TF = True
        # The parent's uncollected garbage came with the fork, TF objects among it (a
        # tf.data iterator held by a cycle: a traceback's frames, a test's excinfo).
        # Collected here, an iterator's destructor waits for its prefetch threads,
        # which the fork did not copy: forever, and in whatever thread the collector
        # ran (a worker's pipe feeder, so the main process waits too). Frozen, the
        # inherited objects are never reached by this process's cycle collector
        # (one whose last reference this process drops is still destroyed); their
        # pages stay shared with the parent's.
        gc.freeze()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)


def forked_after_tf() -> bool:
    """Whether this process was forked from one whose TensorFlow runtime had started:
    TF's reader cannot run here (:func:`tfx_bridge.torch.decode.reader_for`)."""
    return _FORKED_AFTER_TF
