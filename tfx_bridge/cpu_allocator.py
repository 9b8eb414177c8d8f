"""TensorFlow's CPU allocator for served graphs, named in one place: the pusher's
manifest sets it on TF Serving, and the children that check and time served graphs
(``child.SERVING_CPU_ENV``) run with it, so what is measured is what serves.

Left to itself TF takes every CPU tensor from malloc. glibc serves a block above its
mmap threshold (32 MB at most) as a fresh mapping and returns it on free, so a graph
whose activations are that large (a CNN or a transformer at batch 32) has the kernel
fault in and zero every such tensor on every call: a third of ResNet-50's time at
batch 32 on a 2-core host (docs/BENCHMARKS.md). With ``TF_CPU_ALLOCATOR_USE_BFC``
TF keeps freed blocks in its BFC arena instead, as onnxruntime keeps its own.
``TF_CPU_BFC_MEM_LIMIT_IN_MB`` caps that arena, so a request larger than the
container's memory fails as TF's ResourceExhausted instead of the pod being killed.
Both are read once by TensorFlow's core when it starts (tensorflow_model_server
included): they are process environment, not server flags.

Example:
    >>> allocator_env("bfc", memory_limit_mb=8192)
    {'TF_CPU_ALLOCATOR_USE_BFC': 'true', 'TF_CPU_BFC_MEM_LIMIT_IN_MB': '7168'}
    >>> allocator_env("malloc", memory_limit_mb=8192)
    {}
    >>> allocator_of(allocator_env("bfc"))
    'bfc'
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional

BFC, MALLOC = "bfc", "malloc"
ALLOCATORS = (BFC, MALLOC)
USE_BFC_VAR = "TF_CPU_ALLOCATOR_USE_BFC"
BFC_LIMIT_VAR = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
VARIABLES = (USE_BFC_VAR, BFC_LIMIT_VAR)
# The arena's share of the container's memory: the rest is the server's own (code,
# request and response buffers, the batching queue), which TF's allocator never sees.
ARENA_SHARE = 0.875


def allocator_env(allocator: str, memory_limit_mb: Optional[int] = None) -> Dict[str, str]:
    """The environment that makes a TensorFlow process use ``allocator`` for CPU
    tensors; the arena capped at ARENA_SHARE of ``memory_limit_mb`` (None: TF's own cap)."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"CPU allocator {allocator!r}: use one of {list(ALLOCATORS)}")
    if allocator == MALLOC:
        return {}
    env = {USE_BFC_VAR: "true"}
    if memory_limit_mb is not None:
        env[BFC_LIMIT_VAR] = str(int(memory_limit_mb * ARENA_SHARE))
    return env


def allocator_of(env: Mapping[str, str]) -> str:
    """The allocator a TensorFlow process started with ``env`` uses, as
    :func:`allocator_env` sets it."""
    return BFC if env.get(USE_BFC_VAR) == "true" else MALLOC
