"""``F.affine_grid`` for torch.onnx.export below opset 20.

torch 2.5 exports ``aten::affine_grid_generator`` only as ONNX AffineGrid,
which exists from opset 20 ("added in version 20"), so a spatial transformer
(``affine_grid`` then ``grid_sample``) is refused at opset 17. The grid is a
linear map of a fixed base grid, so it is exported from ops every opset has:

- the base grid holds, for each output position, its normalised coordinates
  ``(x, y[, z], 1)``, built in the graph from the requested size (constant or
  dynamic): coordinate ``i`` of an axis of length ``n`` is ``(2i - (n - 1)) /
  d`` with ``d = n - 1`` when ``align_corners`` and ``d = n`` otherwise (0 for
  ``n = 1``), which is PyTorch's ``linspace(-1, 1, n)`` and its
  ``* (n - 1) / n`` rescale;
- the grid is that base, flattened to ``[1, positions, k + 1]``, times
  ``theta`` transposed (``[N, k + 1, k]``), reshaped to ``[N, *size, k]``.

Example (inside ``symbolic_rewrites.onnx_symbolics()``)::

    torch.onnx.export(SpatialTransformer(), (x,), "stn.onnx", opset_version=17)
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import torch
from torch.onnx import symbolic_helper as sym

from tfx_bridge.components.pytorch_model_importer.export.complex_pairs import (
    cast_like,
    i64,
    refuse,
    scalar_i64,
)

AFFINE_GRID_MATMUL = "affine-grid-matmul"  # the report's rewrite kind
AFFINE_GRID = "aten::affine_grid_generator"

_USED: List[str] = []  # "2-D"/"3-D" per affine_grid exported in the current block


def _sizes(g, size) -> list:
    """The requested size as int64 scalars, one per dimension (constant or dynamic)."""
    if sym._is_packed_list(size):
        return [scalar_i64(g, v) for v in sym._unpack_list(size)]
    const = sym._maybe_get_const(size, "is")
    if isinstance(const, (list, tuple)) and all(isinstance(v, int) for v in const):
        return [i64(g, int(v)) for v in const]
    refuse("affine_grid's size must be a list of sizes to export", size)
    return []


def _coordinates(g, n, align_corners: bool, like):
    """The normalised coordinates of an axis of length ``n`` (1-D, ``like``'s type)."""
    i = g.op("Range", i64(g, 0), n, i64(g, 1))
    numerator = g.op("Sub", g.op("Mul", i, i64(g, 2)), g.op("Sub", n, i64(g, 1)))
    denominator = g.op("Sub", n, i64(g, 1)) if align_corners else n
    denominator = g.op("Max", denominator, i64(g, 1))
    x = g.op("Div", g.op("Cast", numerator, to_i=1), g.op("Cast", denominator, to_i=1))
    return cast_like(g, x, like)


def _affine_grid(g, theta, size, align_corners):
    align = sym._maybe_get_const(align_corners, "b")
    if not isinstance(align, (bool, int)):
        refuse("affine_grid's align_corners must be constant to export", theta)
    dims = _sizes(g, size)
    if len(dims) not in (4, 5):
        refuse(f"affine_grid of a {len(dims)}-D size (PyTorch takes 4-D and 5-D)", theta)
    spatial = dims[2:]  # (H, W) or (D, H, W)
    k = len(spatial)
    shape = g.op("Concat", *[sym._unsqueeze_helper(g, d, [0]) for d in spatial], axis_i=0)
    # Channel j of the base grid varies along spatial axis k - 1 - j: x along the
    # last (W), y along H, z along D; the last channel is 1.
    channels = []
    for j in range(k):
        axis = k - 1 - j
        coords = _coordinates(g, spatial[axis], bool(align), theta)
        along = sym._unsqueeze_helper(g, coords, [a for a in range(k) if a != axis])
        channels.append(g.op("Expand", along, shape))
    ones = g.op("Expand", cast_like(g, g.op("Constant", value_t=torch.tensor(1.0)), theta),
                shape)
    channels.append(ones)
    base = g.op("Concat", *[sym._unsqueeze_helper(g, c, [k]) for c in channels], axis_i=k)
    flat = g.op("Reshape", base, g.op("Constant", value_t=torch.tensor([1, -1, k + 1])))
    grid = g.op("MatMul", flat, g.op("Transpose", theta, perm_i=[0, 2, 1]))
    out_shape = g.op("Concat", sym._unsqueeze_helper(g, dims[0], [0]), shape,
                     g.op("Constant", value_t=torch.tensor([k])), axis_i=0)
    _USED.append(f"{k}-D")
    return g.op("Reshape", grid, out_shape)


def symbolics(opsets: Sequence[int]) -> Dict[str, Tuple[Callable, List[int]]]:
    """``{aten name: (symbolic, opsets)}`` for affine_grid, below opset 20 (from there
    torch's own AffineGrid export is kept)."""
    _USED.clear()
    return {AFFINE_GRID: (_affine_grid, [o for o in opsets if o < 20])}


def used() -> List[str]:
    """The affine_grid calls the last export block exported (their dimensionality)."""
    return list(_USED)
