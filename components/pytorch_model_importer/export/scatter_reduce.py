"""``scatter_reduce`` for the forms torch.onnx.export refuses or gets wrong.

torch 2.5's symbolic (opset 16 on) refuses ``reduce="mean"`` and
``include_self=False`` (TAPAS's segment means and minima, GNN pooling written
``scatter_reduce(..., include_self=False)``), and exports ``amax``/``amin`` as
ScatterElements reductions ONNX defines only from opset 18. Those are exported
as a dense segment reduction: a one-hot ``index == segment`` mask over a new
last axis, the masked values reduced along ``dim``, the segment axis moved back
to ``dim``, and the input kept where no index points (include_self=False) or
combined with it (include_self=True). Exact for every reduction; memory grows
with index size times segment count, which the export sample keeps small and
models that scatter into a handful of segments per row keep small too.

``sum``/``prod`` with ``include_self=True`` keep torch's ScatterElements form.
"""
from __future__ import annotations

from typing import Dict, List

import torch
from torch.onnx import symbolic_helper as sym

from tfx_bridge.components.pytorch_model_importer.export.registry import TorchSymbolics

SCATTER_REDUCE = "aten::scatter_reduce"
SCATTER_REDUCE_DENSE = "scatter-reduce-dense"  # the report's rewrite kind
_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")

_USED: List[str] = []  # "reduce include_self=..." per call in the current block
_TORCH = TorchSymbolics()  # torch's own scatter_reduce, for the forms it exports


def _const(g, values, dtype=torch.int64):
    return g.op("Constant", value_t=torch.tensor(values, dtype=dtype))


def _fill(g, reduce: str, like):
    """The identity of ``reduce`` in ``like``'s dtype (masked-out positions)."""
    kind = sym._type_utils.JitScalarType.from_value(like, sym._type_utils.JitScalarType.FLOAT)
    floating = kind.dtype().is_floating_point
    if reduce in ("sum", "mean"):
        value = 0
    elif reduce == "prod":
        value = 1
    elif floating:
        value = float("-inf") if reduce == "amax" else float("inf")
    else:
        info = torch.iinfo(kind.dtype())
        value = info.min if reduce == "amax" else info.max
    return g.op("Constant", value_t=torch.tensor(value, dtype=kind.dtype()))


def _reduce(g, op: str, x, axis: int):
    if op == "ReduceSum" or sym.GLOBALS.export_onnx_opset_version >= 18:
        return g.op(op, x, _const(g, [axis]), keepdims_i=0)
    return g.op(op, x, axes_i=[axis], keepdims_i=0)


def _dense(g, self, dim: int, index, src, reduce: str, include_self: bool):
    rank = sym._get_tensor_rank(self)
    if rank is None or sym._get_tensor_rank(index) != rank:
        raise torch.onnx.errors.SymbolicValueError(
            "scatter_reduce export needs self and index of one known rank", self)
    axis = dim % rank
    segments = g.op("Gather", g.op("Shape", self), _const(g, axis), axis_i=0)
    ids = g.op("Range", _const(g, 0), segments, _const(g, 1))
    ids = g.op("Reshape", ids, _const(g, [1] * rank + [-1]))  # segment ids on a new last axis
    hit = g.op("Equal", sym._unsqueeze_helper(g, index, [rank]), ids)
    values = g.op("Where", hit, sym._unsqueeze_helper(g, src, [rank]), _fill(g, reduce, src))
    op = {"sum": "ReduceSum", "mean": "ReduceSum", "prod": "ReduceProd",
          "amax": "ReduceMax", "amin": "ReduceMin"}[reduce]
    # Reducing `axis` leaves the segments last: move them back to `axis`.
    perm = list(range(axis)) + [rank - 1] + list(range(axis, rank - 1))

    def back(x):
        return g.op("Transpose", x, perm_i=perm) if axis != rank - 1 else x

    reduced = back(_reduce(g, op, values, axis))
    count = back(_reduce(g, "ReduceSum", g.op("Cast", hit, to_i=7), axis))
    pointed = g.op("Greater", count, _const(g, 0))
    if reduce == "mean":
        count = g.op("CastLike", g.op("Add", count, _const(g, int(include_self))), self)
        total = g.op("Add", reduced, self) if include_self else reduced
        one = g.op("CastLike", _const(g, 1), self)
        reduced = g.op("Div", total, g.op("Max", count, one))
    elif include_self:
        combine = {"sum": "Add", "prod": "Mul", "amax": "Max", "amin": "Min"}[reduce]
        reduced = g.op(combine, self, reduced)
    return g.op("Where", pointed, reduced, self)


def scatter_reduce(g, self, dim, index, src, reduce, include_self=None):
    """aten::scatter_reduce: dense for what torch refuses, torch's own otherwise."""
    name = sym._maybe_get_const(reduce, "s")
    keep = True if include_self is None or sym._is_none(include_self) else bool(
        sym._maybe_get_const(include_self, "b"))
    axis = sym._maybe_get_const(dim, "i")
    opset = sym.GLOBALS.export_onnx_opset_version
    torch_handles = (name in ("sum", "prod") and keep) or (
        name in ("amax", "amin") and keep and opset >= 18)
    if torch_handles or name not in _REDUCTIONS or not isinstance(axis, int):
        return _TORCH.call(SCATTER_REDUCE, g, self, dim, index, src, reduce, include_self)
    _USED.append(f"{name} include_self={keep}")
    return _dense(g, self, axis, index, src, name, keep)


def symbolics(opsets) -> Dict[str, tuple]:
    """``{aten name: (symbolic, opsets)}``; torch's own looked up before registering."""
    _USED.clear()
    _TORCH.capture([SCATTER_REDUCE], opsets)
    return {SCATTER_REDUCE: (scatter_reduce, list(opsets))}


def used() -> List[str]:
    return list(_USED)
