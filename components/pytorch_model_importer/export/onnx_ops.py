"""Small ONNX graph-building helpers shared by the fused kernels' symbolics.

Imported only when a torch module is exported (torch is the ``onnx`` extra).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch.onnx import symbolic_helper as sym

FLOAT, INT64, BOOL = 1, 7, 9  # ONNX TensorProto data types


def const(g, values, dtype=torch.int64):
    return g.op("Constant", value_t=torch.tensor(values, dtype=dtype))


def scalar(g, value: float):
    return g.op("Constant", value_t=torch.tensor(value, dtype=torch.float32))


def reduce_axes(g, op: str, x, axes: Sequence[int], keepdims: int = 0):
    """ReduceMean/ReduceMax/ReduceSum over ``axes`` in the form the opset wants."""
    if op == "ReduceSum":
        return sym._reducesum_helper(g, x, axes_i=list(axes), keepdims_i=keepdims)
    if g.opset >= 18:
        return g.op(op, x, const(g, list(axes)), keepdims_i=keepdims)
    return g.op(op, x, axes_i=list(axes), keepdims_i=keepdims)


def slice_axis(g, x, start: int, end: int, axis: int):
    return g.op("Slice", x, const(g, [start]), const(g, [end]), const(g, [axis]))


def opt_int(value) -> Optional[int]:
    if value is None or sym._is_none(value):
        return None
    return int(sym._maybe_get_const(value, "i"))

