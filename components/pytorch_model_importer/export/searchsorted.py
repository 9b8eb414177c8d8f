"""``torch.searchsorted`` for torch.onnx.export.

torch 2.5's TorchScript exporter has no symbolic for it (it has one for
``torch.bucketize``, the same question with 1-D boundaries), so a tabular model
that bins a numeric feature with searchsorted (quantile bins, piecewise-linear
encodings) is refused. For each value it asks how many entries of a sorted
sequence come before it, which needs no search: the index is the count of
entries below the value (``side="left"``) or at most the value
(``side="right"``, ``right=True``), a broadcast comparison summed over the
sequence axis. Exact, and as fast as a search for the short boundary lists
such models hold. A 1-D sequence serves every value; an N-D one pairs its
leading axes with the values'. Values and sequence of different types are
compared in float64, as torch compares them after promotion. ``sorter`` is
refused by name.

Example (inside ``symbolic_rewrites.onnx_symbolics()``)::

    torch.onnx.export(QuantileBins(), (price,), "m.onnx", opset_version=17)
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import torch
from torch.onnx import symbolic_helper as sym

COMPARE_COUNT = "searchsorted-compare-count"  # the report's rewrite kind

_USED: List[str] = []  # one "searchsorted" per call in the current block


def _flag(value, what: str, like) -> bool:
    if value is None or sym._is_none(value):
        return False
    const = sym._maybe_get_const(value, "b")
    if not isinstance(const, (bool, int)):
        raise torch.onnx.errors.SymbolicValueError(f"{what} must be constant to export", like)
    return bool(const)


def _same_type(g, a, b):
    kind = sym._type_utils.JitScalarType
    ta = kind.from_value(a, kind.UNDEFINED)
    tb = kind.from_value(b, kind.UNDEFINED)
    if ta == tb and ta != kind.UNDEFINED:
        return a, b
    double = torch.onnx.TensorProtoDataType.DOUBLE
    return g.op("Cast", a, to_i=double), g.op("Cast", b, to_i=double)


def _count(g, sorted_sequence, values, right: bool, out_int32: bool, name: str):
    rank = sym._get_tensor_rank(sorted_sequence)
    if rank is None or sym._get_tensor_rank(values) is None:
        raise torch.onnx.errors.SymbolicValueError(
            f"{name} needs the ranks of its sequence and values", values)
    _USED.append(name)
    entries, values = _same_type(g, sorted_sequence, values)
    if rank > 1:  # [..., M] against [..., N]: [..., 1, M] against [..., N, 1]
        entries = sym._unsqueeze_helper(g, entries, [rank - 1])
    before = g.op("LessOrEqual" if right else "Less", entries,
                  sym._unsqueeze_helper(g, values, [-1]))
    ones = g.op("Cast", before, to_i=torch.onnx.TensorProtoDataType.INT64)
    count = sym._reducesum_helper(g, ones, axes_i=[-1], keepdims_i=0)
    if out_int32:
        return g.op("Cast", count, to_i=torch.onnx.TensorProtoDataType.INT32)
    return count


def _searchsorted(g, sorted_sequence, self, out_int32=None, right=None, side=None,
                  sorter=None):
    if sorter is not None and not sym._is_none(sorter):
        raise torch.onnx.errors.SymbolicValueError(
            "searchsorted with a sorter (sort the sequence first) does not export", self)
    after = _flag(right, "searchsorted right", self)
    if side is not None and not sym._is_none(side):
        after = sym._maybe_get_const(side, "s") == "right"
    return _count(g, sorted_sequence, self, after,
                  _flag(out_int32, "searchsorted out_int32", self), "searchsorted")


def symbolics(opsets: Sequence[int]) -> Dict[str, Tuple[Callable, List[int]]]:
    """``{aten name: (symbolic, opsets)}`` for searchsorted."""
    _USED.clear()
    return {"aten::searchsorted": (_searchsorted, list(opsets))}


def used() -> List[str]:
    """The searchsorted calls the last export block exported."""
    return list(_USED)
