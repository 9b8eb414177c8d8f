"""The op registry: which handler converts each ONNX op type, the attributes it
accepts, and what to tell a user about an op type nothing handles.

Op modules register their handlers with :func:`op` when imported
(``tfx_bridge.onnx_tf.ops`` imports them all); the interpreter in core.py and the
pre-trace check in check.py read :data:`REGISTRY`.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

if TYPE_CHECKING:
    from tfx_bridge.onnx_tf.check import NodeInfo
    from tfx_bridge.onnx_tf.core import Node

# An attribute default meaning "the attribute must be given".
REQUIRED = object()
# The ONNX domain names of the standard ops (the only ones converted).
ONNX_DOMAINS = ("", "ai.onnx")


@dataclasses.dataclass
class OpDef:
    handler: Callable[[Node], Any]
    attrs: Dict[str, Any]
    check: Optional[Callable[[NodeInfo], Optional[str]]]
    fold: bool
    since: int


REGISTRY: Dict[str, OpDef] = {}


def op(*names: str, attrs: Optional[Dict[str, Any]] = None,
       check: Optional[Callable[[NodeInfo], Optional[str]]] = None, fold: bool = True,
       since: int = 1):
    """Registers a handler for ONNX op types ``names``.

    ``attrs`` maps every attribute the handler understands (across opset
    versions) to its default (``REQUIRED`` when it has none); a node carrying
    any other attribute is refused by name. ``check`` returns a refusal
    (string) for a variant decided by attributes alone, so :func:`check_model`
    reports it before tracing. ``fold=False`` for ops that must run at serving
    time even on constant inputs (random ops). The handler returns one output
    or a list of outputs (tf.Tensor or numpy arrays).
    """
    def register(fn):
        for name in names:
            REGISTRY[name] = OpDef(fn, dict(attrs or {}), check, fold, since)
        return fn
    return register


OP_FIXES = {
    "Loop": ("a loop the exporter could not unroll (a Python loop over a tensor's length, "
             "or nn.EmbeddingBag with offsets): loop over a fixed count"),
    "Scan": "a scan over a tensor dimension: unroll it over a fixed size",
    "SequenceMap": "a loop over a list of tensors: loop over a fixed count instead",
}
DEFAULT_FIX = "rewrite that part of the model with standard tensor ops"


def add_fixes(fixes: Dict[str, str]) -> None:
    """What to change in the model, per op type an ops module leaves unregistered."""
    OP_FIXES.update(fixes)
