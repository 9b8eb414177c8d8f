"""``F.fold`` (``aten::col2im``) for torch.onnx.export below opset 18.

torch 2.5 exports ``col2im`` only as ONNX Col2Im, an opset-18 op, so a model
that folds patches back into an image (a patch-based decoder, overlap-add) is
refused at opset 17. Folding is a transposed convolution with one-hot kernels:
the column of patch offset ``(i, j)`` of channel ``c`` is added at that offset
of every block's window, which is what ConvTranspose does with a kernel that is
1 at ``(i, j)`` and 0 elsewhere. So the columns ``[N, C*kh*kw, L]`` are laid
out as ``N*C`` block grids ``[kh*kw, Lh, Lw]`` and transposed-convolved with
those kernels (the fold's stride, dilation and padding; output padding for
the rows and columns no block reaches), then reshaped to ``[N, C, H, W]``.
``F.unfold`` (``im2col``) torch already exports at opset 11.

Example (inside ``symbolic_rewrites.onnx_symbolics()``)::

    torch.onnx.export(PatchDecoder(), (tokens,), "m.onnx", opset_version=17)
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import torch
from torch.onnx import symbolic_helper as sym

FOLD_CONV_TRANSPOSE = "fold-conv-transpose"  # the report's rewrite kind
COL2IM = "aten::col2im"

_USED: List[str] = []  # "kh x kw -> H x W" per fold exported in the current block


def _pair(value, what: str, like) -> List[int]:
    const = sym._maybe_get_const(value, "is")
    if isinstance(const, int):
        const = [const, const]
    if not (isinstance(const, (list, tuple)) and len(const) == 2
            and all(isinstance(v, int) for v in const)):
        raise torch.onnx.errors.SymbolicValueError(f"fold {what} must be two constant ints",
                                                   like)
    return list(const)


def _col2im(g, self, output_size, kernel_size, dilation, padding, stride):
    (h, w), (kh, kw) = _pair(output_size, "output_size", self), _pair(kernel_size, "kernel_size",
                                                                      self)
    (dh, dw), (ph, pw) = _pair(dilation, "dilation", self), _pair(padding, "padding", self)
    sh, sw = _pair(stride, "stride", self)
    rank = sym._get_tensor_rank(self)
    if rank not in (2, 3):
        raise torch.onnx.errors.SymbolicValueError(
            f"fold takes a 2-D or 3-D input, and this one's rank is {rank}", self)
    reach_h, reach_w = h + 2 * ph - dh * (kh - 1) - 1, w + 2 * pw - dw * (kw - 1) - 1
    if reach_h < 0 or reach_w < 0:
        raise torch.onnx.errors.SymbolicValueError(
            f"fold of a {kh}x{kw} kernel does not fit an output of {h}x{w}", self)
    blocks_h, blocks_w = reach_h // sh + 1, reach_w // sw + 1
    # [N, C*kh*kw, L] is [N, C, kh*kw, L]: every (image, channel) is one ConvTranspose
    # input of kh*kw channels on the block grid; the channel count is never needed.
    grid = g.op("Reshape", self, g.op("Constant", value_t=torch.tensor(
        [-1, kh * kw, blocks_h, blocks_w], dtype=torch.int64)))
    kernel = torch.zeros(kh * kw, 1, kh, kw)
    for i in range(kh):
        for j in range(kw):
            kernel[i * kw + j, 0, i, j] = 1.0
    weight = g.op("CastLike", g.op("Constant", value_t=kernel), self)
    out = g.op("ConvTranspose", grid, weight, kernel_shape_i=[kh, kw],
               strides_i=[sh, sw], dilations_i=[dh, dw], pads_i=[ph, pw, ph, pw],
               output_padding_i=[reach_h % sh, reach_w % sw])
    image = g.op("Constant", value_t=torch.tensor([-1, h, w], dtype=torch.int64))
    if rank == 3:
        batch = g.op("Slice", g.op("Shape", self), g.op("Constant", value_t=torch.tensor([0])),
                     g.op("Constant", value_t=torch.tensor([1])))
        image = g.op("Concat", batch, image, axis_i=0)
    _USED.append(f"{kh}x{kw} -> {h}x{w}")
    return g.op("Reshape", out, image)


def symbolics(opsets: Sequence[int]) -> Dict[str, Tuple[Callable, List[int]]]:
    """``{aten name: (symbolic, opsets)}`` for col2im from opset 15 (CastLike) below 18
    (from there torch's own Col2Im export is kept)."""
    _USED.clear()
    return {COL2IM: (_col2im, [o for o in opsets if 15 <= o < 18])}


def used() -> List[str]:
    """The folds the last export block exported."""
    return list(_USED)
