"""ONNX symbolic for PyTorch's fused ``aten::embedding_bag`` (fused.py registers it).

Fixed-width 2-D ids (offsets ``arange(0, N, W)``, as ``F.embedding_bag``
writes them) become a Gather over ``[B, W]`` and a reduction; ragged 1-D ids +
offsets are scattered (ScatterND, segment ids by ScatterElements + CumSum, or a
comparison below opset 16) into a padded ``[B, max_len, D]`` block, then the
same reduction. No Loop (torch's own symbolic's form).
"""
from __future__ import annotations

import torch
from torch.onnx import symbolic_helper as sym

from tfx_bridge.components.pytorch_model_importer.export.onnx_ops import (
    BOOL,
    FLOAT,
    INT64,
    const,
    opt_int,
    reduce_axes,
    scalar,
    slice_axis,
)

EMBEDDING_BAG = "aten::embedding_bag"
_LOWEST = float(torch.finfo(torch.float32).min)


def _fixed_width(g, offsets):
    """W when ``offsets`` is arange(0, N, W) (F.embedding_bag over 2-D ids), else None."""
    def uncast(value):
        while value.node().kind() == "onnx::Cast":
            value = value.node().input()
        return value

    node = uncast(offsets).node()
    if node.kind() != "onnx::Range":
        return None
    start, _limit, delta = node.inputs()
    start = uncast(start)
    if not sym._is_onnx_constant(start) or int(sym._parse_arg(start, "i")) != 0:
        return None
    return delta


def _embedding_bag(g, weight, indices, offsets, scale_grad_by_freq=None, mode=None,
                   sparse=None, per_sample_weights=None, include_last_offset=None,
                   padding_idx=None):
    mode = 0 if mode is None else int(sym._get_const(mode, "i", "mode"))
    last_offset = bool(include_last_offset is not None and not sym._is_none(include_last_offset)
                       and sym._get_const(include_last_offset, "b", "include_last_offset"))
    pad = opt_int(padding_idx)
    pad = None if pad is None or pad < 0 else pad
    psw = None if per_sample_weights is None or sym._is_none(per_sample_weights) \
        else per_sample_weights
    if psw is not None and mode != 0:
        raise torch.onnx.errors.SymbolicValueError(
            "embedding_bag: per_sample_weights needs mode='sum'.", per_sample_weights)
    if mode not in (0, 1, 2):
        raise torch.onnx.errors.SymbolicValueError(f"embedding_bag mode {mode}?", indices)
    indices = g.op("Cast", indices, to_i=INT64)
    width = None if last_offset else _fixed_width(g, offsets)

    if width is not None:  # fixed width: [B, W] ids
        shape = g.op("Concat", const(g, [-1]),
                     g.op("Reshape", g.op("Cast", width, to_i=INT64), const(g, [1])), axis_i=0)
        ids = g.op("Reshape", indices, shape)                                 # [B, W]
        vectors = g.op("Gather", weight, ids, axis_i=0)                      # [B, W, D]
        if psw is not None:
            vectors = g.op("Mul", vectors,
                           sym._unsqueeze_helper(g, g.op("Reshape", psw, shape), [2]))
        keep = None
        if pad is not None:
            keep = g.op("Cast", g.op("Not", g.op("Equal", ids, const(g, pad))), to_i=FLOAT)
    else:  # ragged: scatter into [B, max_len, D]
        vectors, keep = _ragged(g, weight, indices, offsets, psw, pad, last_offset)
    return _pool(g, vectors, keep, mode), None, None, None


def _ragged(g, weight, indices, offsets, psw, pad, last_offset: bool):
    """Ragged bags as a padded block: (vectors [B, M, D], keep [B, M] float)."""
    offsets = g.op("Cast", offsets, to_i=INT64)
    if last_offset:
        offsets = slice_axis(g, offsets, 0, -1, 0)
    n = g.op("Shape", indices)                                                # [1]: N
    bags = g.op("Shape", offsets)                                             # [1]: B
    positions = g.op("Range", const(g, 0), g.op("Squeeze", n) if g.opset < 13 else
                     sym._squeeze_helper(g, n, [0]), const(g, 1))           # [N]
    if g.opset >= 16:
        marks = g.op("ScatterElements",
                     g.op("ConstantOfShape", g.op("Add", n, const(g, [1])),
                          value_t=torch.tensor([0], dtype=torch.int64)),
                     offsets, g.op("ConstantOfShape", bags,
                                   value_t=torch.tensor([1], dtype=torch.int64)),
                     axis_i=0, reduction_s="add")
        starts = g.op("CumSum", g.op("Slice", marks, const(g, [0]), n, const(g, [0])),
                      const(g, 0))
    else:  # number of offsets <= j, without a scatter-add
        le = g.op("LessOrEqual", sym._unsqueeze_helper(g, offsets, [0]),
                  sym._unsqueeze_helper(g, positions, [1]))                   # [N, B]
        starts = reduce_axes(g, "ReduceSum", g.op("Cast", le, to_i=INT64), [1], keepdims=0)
    segment = g.op("Sub", starts, const(g, 1))                               # [N]
    within = g.op("Sub", positions, g.op("Gather", offsets, segment, axis_i=0))
    ends = g.op("Concat", slice_axis(g, offsets, 1, 2**62, 0), n, axis_i=0)
    lengths = g.op("Sub", ends, offsets)                                      # [B]
    longest = g.op("Max", reduce_axes(g, "ReduceMax", lengths, [0], keepdims=1), const(g, [1]))
    where = g.op("Concat", sym._unsqueeze_helper(g, segment, [1]),
                 sym._unsqueeze_helper(g, within, [1]), axis_i=1)             # [N, 2]
    block = g.op("Concat", bags, longest, axis_i=0)                           # [B, M]
    dim = slice_axis(g, g.op("Shape", weight), 1, 2, 0)
    vectors = g.op("Gather", weight, indices, axis_i=0)                       # [N, D]
    if psw is not None:
        vectors = g.op("Mul", vectors, sym._unsqueeze_helper(g, psw, [1]))
    vectors = g.op("ScatterND", g.op("ConstantOfShape", g.op("Concat", block, dim, axis_i=0),
                                     value_t=torch.tensor([0.0])), where, vectors)
    keep = g.op("ConstantOfShape", g.op("Shape", indices), value_t=torch.tensor([1.0]))
    if pad is not None:
        keep = g.op("Cast", g.op("Not", g.op("Equal", indices, const(g, pad))), to_i=FLOAT)
    keep = g.op("ScatterND", g.op("ConstantOfShape", block, value_t=torch.tensor([0.0])),
                where, keep)
    return vectors, keep


def _pool(g, vectors, keep, mode: int):
    """Sum/mean/max over axis 1 of [B, W, D], leaving out keep == 0 (empty bag: zeros)."""
    if mode == 2:
        if keep is None:
            return reduce_axes(g, "ReduceMax", vectors, [1])
        kept = g.op("Cast", sym._unsqueeze_helper(g, keep, [2]), to_i=BOOL)   # [B, W, 1]
        pooled = reduce_axes(g, "ReduceMax", g.op("Where", kept, vectors, scalar(g, _LOWEST)), [1])
        some = g.op("Greater", reduce_axes(g, "ReduceMax", keep, [1], keepdims=1), scalar(g, 0.0))
        return g.op("Where", some, pooled, scalar(g, 0.0))
    if keep is not None:
        vectors = g.op("Mul", vectors, sym._unsqueeze_helper(g, keep, [2]))
    total = reduce_axes(g, "ReduceSum", vectors, [1])
    if mode == 0:
        return total
    if keep is None:
        count = g.op("Cast", slice_axis(g, g.op("Shape", vectors), 1, 2, 0), to_i=FLOAT)
    else:
        count = g.op("Max", reduce_axes(g, "ReduceSum", keep, [1], keepdims=1), scalar(g, 1.0))
    return g.op("Div", total, count)


SYMBOLICS = {EMBEDDING_BAG: _embedding_bag}
