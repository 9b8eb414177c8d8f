"""Symbolic rewrites: torch.onnx symbolics replaced where torch's own export some
models wrongly or not at all, whatever the hand-over form (eager module,
state_dict or TorchScript).

Imported only when a torch module is exported (torch is the ``onnx`` extra).
For the duration of an export, :func:`onnx_symbolics` registers:

- ``aten::index_add`` (opset >= 16): torch's own symbolic scatters without a
  reduction, so duplicated indices overwrite; exported as
  ``ScatterElements(reduction="add")``;
- ``aten::adaptive_avg_pool{1,2,3}d``: torch's own symbolic refuses an output
  size that does not divide the input size (AlexNet's
  ``AdaptiveAvgPool2d((6, 6))`` below a 224 input); exported as a MatMul with
  a constant averaging matrix per pooled axis (PyTorch's windows, exact);
- ``aten::repeat_interleave`` by one count: Unsqueeze, Expand, Reshape
  (torch's own exports an Expand onnxruntime refuses for some of them);
- ``aten::any``/``aten::all`` on non-bool tensors: cast to bool first (torch's
  own symbolics assume bool input);
- ``aten::scatter_reduce`` with mean, include_self=False, or amax/amin below
  opset 18 (scatter_reduce.py): a dense one-hot segment reduction;
- bitwise ``& | ^ ~`` on integer tensors (integer_bitwise.py): exact integer
  arithmetic;
- ``aten::fft_*`` and complex arithmetic (spectral.py): complex tensors
  as (real, imaginary) pairs, each transform a MatMul with a DFT matrix;
- ``aten::searchsorted`` (searchsorted.py): a broadcast comparison with the
  sorted entries, counted;
- ``aten::col2im`` (``F.fold``) below opset 18 (patches.py): a ConvTranspose
  with one-hot kernels;
- ``aten::affine_grid_generator`` below opset 20 (grids.py): a base grid of
  normalised coordinates times ``theta`` (torch exports only AffineGrid, an
  opset-20 op).

:func:`rewrites` names the ones the last export used, for the import report.
PyTorch's fused kernels (TorchScript only) are fused.py's.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Sequence

import torch
from torch.onnx import symbolic_helper as sym
from torch.onnx import symbolic_opset9 as opset9

from tfx_bridge.components.pytorch_model_importer.export import (
    grids,
    integer_bitwise,
    patches,
    scatter_reduce,
    searchsorted,
    spectral,
)
from tfx_bridge.components.pytorch_model_importer.export.registry import (
    OPSETS,
    TorchSymbolics,
    registered,
)


def _index_add(g, self, dim, index, other, alpha=None):
    """``index_add`` as ONNX ``ScatterElements(reduction="add")``.

    torch 2.5's own symbolic scatters without a reduction (it warns that
    duplicated indices make the model incorrect): rows sharing an index
    overwrite each other instead of adding up. From opset 16 ScatterElements
    adds duplicates, exactly what ``index_add`` computes.
    """
    axis = sym._maybe_get_const(dim, "i")
    rank = sym._get_tensor_rank(self)
    if not isinstance(axis, int) or rank is None or sym._get_tensor_rank(other) != rank:
        raise torch.onnx.errors.SymbolicValueError(
            "index_add needs a constant dim and self/source of one known rank", self)
    axis = axis % rank
    if alpha is not None and not sym._is_none(alpha):
        scale = sym._maybe_get_scalar(alpha)
        if not (isinstance(scale, (int, float)) and scale == 1):
            other = g.op("Mul", other, g.op("CastLike", alpha, other))
    _INDEX_ADDS.append(1)
    idx = sym._unsqueeze_helper(g, index, [i for i in range(rank) if i != axis])
    idx = g.op("Expand", idx, g.op("Shape", other))
    return g.op("ScatterElements", self, idx, other, axis_i=axis, reduction_s="add")


def _truth_reduction(name: str, torch_symbolic):
    def symbolic(g, *args):
        """``any``/``all`` of a non-bool tensor, read as torch reads it: nonzero is True.

        torch 2.5's own symbolics take bool input only and do not say so: ``all``
        applies ONNX Not to the tensor (an invalid graph for integers: MEGA's
        ``(1 - mask).all(-1)``) and ``any`` sums the int64 cast, so -1 and 1
        cancel out. The input is cast to bool first (ONNX Cast: nonzero -> True).
        """
        x = args[0]
        if not sym._is_bool(x):
            x = g.op("Cast", x, to_i=torch.onnx.TensorProtoDataType.BOOL)
            _TRUTH_CASTS.append(name)
        return torch_symbolic(g, x, *args[1:])
    return symbolic


_TRUTH_CASTS: List[str] = []  # any/all calls on non-bool tensors in the current block
TRUTH_REDUCTION_BOOL = "any-all-cast-to-bool"
_TRUTH = {"aten::any": _truth_reduction("aten::any", opset9._any),
          "aten::all": _truth_reduction("aten::all", opset9._all)}

def _single_repeat(repeats):
    """The one repeat count of ``repeats`` (an int or a one-element tensor), else None."""
    value = sym._maybe_get_const(repeats, "t") if sym._is_value(repeats) else repeats
    if isinstance(value, torch.Tensor):
        return int(value.reshape(-1)[0]) if value.numel() == 1 else None
    return value if isinstance(value, int) else None


def _repeat_interleave(g, self, repeats, dim=None, output_size=None):
    """``repeat_interleave`` by one count: Unsqueeze, Expand, Reshape.

    torch 2.5's symbolic takes a path for a constant count along an axis of
    known size that broadcasts the count itself: Cohere's rotary embedding
    (``repeat_interleave(freqs, 2, dim=-1)``) exports an Expand onnxruntime
    refuses at every batch ("invalid expand shape"). One count needs none of
    that: each element gets a new axis, is expanded to ``count`` copies along
    it, and the two axes merge. Per-element counts (a repeats tensor) keep
    torch's symbolic.
    """
    count = _single_repeat(repeats)
    rank = sym._get_tensor_rank(self)
    if count is None or rank is None:
        return _TORCH_REPEAT.call(REPEAT_INTERLEAVE, g, self, repeats, dim, output_size)
    if dim is None or sym._is_none(dim):
        self = g.op("Reshape", self, g.op("Constant", value_t=torch.tensor([-1])))
        rank, axis = 1, 0
    else:
        axis = sym._maybe_get_const(dim, "i")
        if not isinstance(axis, int):
            return _TORCH_REPEAT.call(REPEAT_INTERLEAVE, g, self, repeats, dim, output_size)
        axis %= rank

    def const(values):
        return g.op("Constant", value_t=torch.tensor(values, dtype=torch.int64))

    def dims(start, end):  # shape[start:end] as a 1-D tensor
        return g.op("Slice", g.op("Shape", self), const([start]), const([end]), const([0]))

    copies = g.op("Expand", sym._unsqueeze_helper(g, self, [axis + 1]),
                  g.op("Concat", dims(0, axis + 1), const([count]), dims(axis + 1, rank),
                       axis_i=0))
    _REPEATS.append(count)
    return g.op("Reshape", copies, g.op(
        "Concat", dims(0, axis), g.op("Mul", dims(axis, axis + 1), const([count])),
        dims(axis + 1, rank), axis_i=0))


_REPEATS: List[int] = []  # repeat_interleave counts exported in the current block
_TORCH_REPEAT = TorchSymbolics()  # torch's own repeat_interleave, for tensor counts
REPEAT_INTERLEAVE = "aten::repeat_interleave"
REPEAT_INTERLEAVE_EXPAND = "repeat-interleave-expand"

_INDEX_ADDS: List[int] = []  # index_add calls exported in the current block
INDEX_ADD = "aten::index_add"
INDEX_ADD_SCATTER_ADD = "index-add-scatter-add"
# ScatterElements adds duplicates from opset 16; below it torch's own symbolic stays.
_INDEX_ADD_OPSETS = tuple(o for o in OPSETS if o >= 16)

def _bins(size: int, out: int):
    """PyTorch's adaptive pooling windows: [floor(i*size/out), ceil((i+1)*size/out))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _pool_matrix(size: int, out: int) -> torch.Tensor:
    """[out, size]: row i averages window i (1/width on it, 0 elsewhere)."""
    matrix = torch.zeros(out, size, dtype=torch.float64)
    for i, (start, end) in enumerate(_bins(size, out)):
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


def _adaptive_avg_pool(n: int):
    @sym.quantized_args(True, False)
    def symbolic(g, input, output_size):
        """``adaptive_avg_pool{n}d`` for any static input size.

        torch's own symbolic exports only output sizes that divide the input
        (AveragePool) or all ones (GlobalAveragePool), and refuses the rest:
        AlexNet's ``AdaptiveAvgPool2d((6, 6))`` below a 224 input, an FPN head
        pooling 7 -> 3. Its windows overlap or vary in width, but along each
        axis an adaptive average is a fixed linear map, so it is exported as a
        MatMul with a constant [out, in] averaging matrix per pooled axis
        (exact: windows as PyTorch computes them). The first two cases keep
        torch's form.
        """
        try:
            out = sym._parse_arg(output_size, "is")
        except Exception:  # noqa: BLE001 (torch's helper raises several kinds)
            return sym._onnx_unsupported("adaptive pooling, since output_size is not constant.",
                                         input)
        if out == [1] * n:
            return g.op("GlobalAveragePool", input)
        sizes = sym._get_tensor_sizes(input)
        rank = None if sizes is None else len(sizes)
        dims = None if sizes is None else sizes[-n:]
        if dims is None or any(d is None for d in dims):
            raise torch.onnx.errors.SymbolicValueError(
                f"adaptive_avg_pool{n}d to {out} needs the input's spatial sizes, and they are "
                "dynamic here; pool to 1 (global) or give the model a fixed input size", input)
        if rank == n + 2 and all(d % o == 0 for d, o in zip(dims, out, strict=True)):
            k = [d // o for d, o in zip(dims, out, strict=True)]
            return g.op("AveragePool", input, kernel_shape_i=k, strides_i=k)
        x = input
        for offset, (d, o) in enumerate(zip(reversed(dims), reversed(out), strict=True)):
            if d == o:
                continue
            axis = rank - 1 - offset
            matrix = g.op("Constant", value_t=_pool_matrix(d, o).to(torch.float32))
            if sym.GLOBALS.export_onnx_opset_version >= 15:
                matrix = g.op("CastLike", matrix, input)
            if axis == rank - 1:
                x = g.op("MatMul", x, g.op("Transpose", matrix, perm_i=[1, 0]))
            elif axis == rank - 2:
                x = g.op("MatMul", matrix, x)
            else:  # the depth axis of a 3-D pool: swapped next to the last, pooled, back
                perm = list(range(rank))
                perm[axis], perm[rank - 2] = rank - 2, axis
                x = g.op("Transpose", x, perm_i=perm)
                x = g.op("Transpose", g.op("MatMul", matrix, x), perm_i=perm)
        _ADAPTIVE_POOLS.append(f"{list(dims)} -> {out}")
        return x

    return symbolic


_ADAPTIVE_POOLS: List[str] = []  # output sizes of adaptive pools exported as MatMul
ADAPTIVE_POOL_MATMUL = "adaptive-pool-matmul"
_ADAPTIVE = {f"aten::adaptive_avg_pool{n}d": _adaptive_avg_pool(n) for n in (1, 2, 3)}


@contextlib.contextmanager
def onnx_symbolics(opsets: Sequence[int] = OPSETS) -> Iterator[None]:
    """Registers the replacement symbolics for the block, then unregisters them.

    Process-wide while the block runs (torch.onnx's registry is global): run
    one export at a time inside it.
    """
    _INDEX_ADDS.clear()
    _ADAPTIVE_POOLS.clear()
    _TRUTH_CASTS.clear()
    _REPEATS.clear()
    _TORCH_REPEAT.capture([REPEAT_INTERLEAVE], opsets)  # before ours is registered
    symbolics = spectral.symbolics(opsets)
    symbolics.update({name: (fn, opsets) for name, fn in _ADAPTIVE.items()})
    symbolics.update({name: (fn, opsets) for name, fn in _TRUTH.items()})
    symbolics[REPEAT_INTERLEAVE] = (_repeat_interleave, list(opsets))
    symbolics.update(scatter_reduce.symbolics(opsets))
    symbolics.update(integer_bitwise.symbolics(opsets))
    symbolics.update(grids.symbolics(opsets))
    symbolics.update(searchsorted.symbolics(opsets))
    symbolics.update(patches.symbolics(opsets))
    symbolics[INDEX_ADD] = (_index_add, [o for o in opsets if o in _INDEX_ADD_OPSETS])
    with registered(symbolics):
        yield


def _counted(calls: Sequence[str], what: str) -> List[str]:
    """``"N <what> <call>"`` per distinct call, in first-seen order."""
    return [f"{calls.count(c)} {what}{' ' + c if c else ''}" for c in dict.fromkeys(calls)]


def rewrites() -> list:
    """The import report's entries for the symbolics replaced during the last export block."""
    from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite

    found = [
        (INDEX_ADD_SCATTER_ADD, _counted([""] * len(_INDEX_ADDS), "index_add call(s)"),
         "torch's index_add symbolic overwrites rows sharing an index; exported as "
         "ScatterElements(reduction='add'), which sums them as PyTorch does"),
        (ADAPTIVE_POOL_MATMUL, [f"adaptive average pool {p}" for p in _ADAPTIVE_POOLS],
         "torch exports adaptive average pooling only when the output size divides the "
         "input size; these pool to other sizes and were exported as a MatMul with a "
         "constant averaging matrix per axis (PyTorch's windows, exact)"),
        (REPEAT_INTERLEAVE_EXPAND,
         _counted([""] * len(_REPEATS), "repeat_interleave call(s) by one count"),
         "torch's repeat_interleave symbolic exports some single-count calls as an Expand "
         "onnxruntime refuses; exported as Unsqueeze, Expand to the count and Reshape"),
        (TRUTH_REDUCTION_BOOL, _counted(_TRUTH_CASTS, "call(s) on non-bool tensors of"),
         "torch's any/all symbolics read only bool tensors (all exports an invalid Not on "
         "integers, any lets -1 and 1 cancel); the input is cast to bool first, nonzero "
         "being True as in PyTorch"),
        (integer_bitwise.BITWISE_ARITHMETIC, _counted(integer_bitwise.used(), "bitwise"),
         "torch exports bitwise &, |, ^, ~ on bool tensors only and ONNX has integer "
         "bitwise ops from opset 18; exported with exact integer arithmetic (lowest bit "
         "with a bool, bit by bit with an int, -x - 1 for ~)"),
        (scatter_reduce.SCATTER_REDUCE_DENSE, _counted(scatter_reduce.used(), "scatter_reduce"),
         "torch refuses scatter_reduce with mean or include_self=False and exports amax/"
         "amin as ScatterElements reductions ONNX has only from opset 18; exported as a "
         "one-hot segment mask reduced along dim (exact)"),
        (searchsorted.COMPARE_COUNT, _counted(searchsorted.used(), "call(s) of"),
         "torch exports no searchsorted; exported as the count of sorted entries below "
         "each value (at most it, for side='right'), a broadcast comparison summed over "
         "the sequence axis (exact)"),
        (patches.FOLD_CONV_TRANSPOSE, [f"fold {f}" for f in patches.used()],
         "torch exports F.fold only as ONNX Col2Im (opset 18); exported as a "
         "ConvTranspose whose kernels are one-hot at each patch offset (exact)"),
        (grids.AFFINE_GRID_MATMUL, _counted(grids.used(), "affine_grid call(s),"),
         "torch exports affine_grid only as ONNX AffineGrid (opset 20); exported as the "
         "base grid of normalised coordinates (PyTorch's, for align_corners as given) "
         "times theta, with ops every opset has"),
        (spectral.FFT_MATMUL, _counted(spectral.used(), "call(s) of"),
         "torch exports no torch.fft op nor istft, and torch.stft only as ONNX STFT without "
         "complex output; exported with complex tensors as (real, imaginary) pairs and each "
         "transform as a MatMul with cosine/sine matrices built from the axis length "
         "(exact angles), stft's frames gathered from the signal and windowed first, "
         "istft's frames overlap-added and divided by the window envelope"),
    ]
    return [Rewrite(kind, nodes, why) for kind, nodes, why in found if nodes]
