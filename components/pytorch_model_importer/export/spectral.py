"""``torch.fft`` and complex arithmetic for torch.onnx.export.

torch 2.5's TorchScript exporter has no symbolic for any ``aten::fft_*`` op
and ONNX has no complex tensors, so a model using ``torch.fft`` (FNet's token
mixing, MEGA's EMA convolution, spectral filters, FFT convolutions) is
refused. For the duration of an export, :func:`symbolics` gives them one:

- a complex tensor is carried as a real one with a trailing axis of 2
  (real, imaginary): the layout ``torch.view_as_real`` uses;
- each transform along one axis is a MatMul with cosine and sine matrices
  built in the graph from the axis length, so dynamic lengths export too.
  The angles are exact: ``(k * t) mod n`` is computed in int64 before the one
  float multiply by ``2 * pi / n``. ``n`` pads or truncates as in torch
  (rows past ``n`` are zero; missing rows are the zero padding);
- complex arithmetic on the pairs is complex_pairs.py's;
- ``torch.stft`` (which torch exports only as ONNX STFT, and not with complex
  output) is the frames gathered from the signal (``1 + (T - n_fft) // hop``
  of them, so dynamic lengths export), times the window (zero-padded to
  ``n_fft`` about its centre, as torch pads it), then the same DFT MatMul;
  ``center=True``'s padding is traced before it as ordinary ops;
- ``torch.istft`` (which torch does not export at all) is each frame's inverse
  DFT, windowed, overlap-added by a ConvTranspose with one-hot kernels at the
  hop's stride, divided by the overlap-added squared window (the envelope),
  then trimmed as torch trims (``center``, ``length``).
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.onnx import symbolic_helper as sym

from tfx_bridge.components.pytorch_model_importer.export import complex_pairs as cx
from tfx_bridge.components.pytorch_model_importer.export.complex_pairs import (
    cast_like,
    const_int,
    i64,
    is_complex,
    join,
    note_dtype,
    parts,
    real_axis,
    real_rank,
    refuse,
    scalar_i64,
)

FFT_MATMUL = "fft-dft-matmul"  # the report's rewrite kind

_USED: List[str] = []  # fft ops exported in the current block


def _length(g, x, axis: int):
    return g.op("Gather", g.op("Shape", x), i64(g, axis), axis_i=0)


def _along(g, t, axis: int, rank: int, matrix):
    """Contracts axis ``axis`` of the real tensor ``t`` with ``matrix`` [L, M]."""
    if axis == rank - 1:
        return g.op("MatMul", t, matrix)
    perm = list(range(rank))
    perm[axis], perm[rank - 1] = rank - 1, axis
    moved = g.op("MatMul", g.op("Transpose", t, perm_i=perm), matrix)
    return g.op("Transpose", moved, perm_i=perm)


def _trig(g, rows, cols, n, like):
    """cos and sin of 2*pi*(r*c mod n)/n for r < rows, c < cols ([rows, cols] each)."""
    r = g.op("Range", i64(g, 0), rows, i64(g, 1))
    c = g.op("Range", i64(g, 0), cols, i64(g, 1))
    prod = g.op("Mod", g.op("Mul", sym._unsqueeze_helper(g, r, [1]),
                            sym._unsqueeze_helper(g, c, [0])), n)
    step = g.op("Div", g.op("Constant", value_t=torch.tensor(2.0 * math.pi)),
                g.op("Cast", n, to_i=1))
    # float32 trig, then the input's type: onnxruntime has no float64 Cos/Sin kernels.
    angle = g.op("Mul", g.op("Cast", prod, to_i=1), step)
    return cast_like(g, g.op("Cos", angle), like), cast_like(g, g.op("Sin", angle), like), r, c


def _scale(g, n, norm: Optional[str], inverse: bool, like):
    """The normalisation factor for one axis of length n, or None for 1."""
    norm = norm or "backward"
    if norm not in ("backward", "forward", "ortho"):
        refuse(f"fft norm {norm!r} (torch accepts backward, forward, ortho)", like)
    if norm == "ortho":
        factor = g.op("Div", g.op("Constant", value_t=torch.tensor(1.0)),
                      g.op("Sqrt", g.op("Cast", n, to_i=1)))
    elif (norm == "backward") == inverse:
        factor = g.op("Div", g.op("Constant", value_t=torch.tensor(1.0)), g.op("Cast", n, to_i=1))
    else:
        return None
    return cast_like(g, factor, like)


def _scaled(g, value, factor):
    return value if factor is None else g.op("Mul", value, factor)


def _c2c(g, x, axis: int, n, norm, inverse: bool, onesided: bool = False):
    """A complex (or real) transform along ``axis``; ``onesided`` keeps n//2+1 bins."""
    rank = real_rank(x)
    note_dtype(x)
    re, im = parts(g, x)
    length = _length(g, re, axis)
    n = length if n is None else n
    bins = g.op("Add", g.op("Div", n, i64(g, 2)), i64(g, 1)) if onesided else n
    cos, sin, rows, _ = _trig(g, length, bins, n, re)
    # Input rows past n are truncated away: zero rows in both matrices.
    kept = sym._unsqueeze_helper(g, g.op("Less", rows, n), [1])
    keep = cast_like(g, g.op("Cast", kept, to_i=1), re)
    factor = _scale(g, n, norm, inverse, re)
    cos = _scaled(g, g.op("Mul", cos, keep), factor)
    sin = _scaled(g, g.op("Mul", sin, keep), factor)
    rc, rs = _along(g, re, axis, rank, cos), _along(g, re, axis, rank, sin)
    if im is None:
        return join(g, rc, rs if inverse else g.op("Neg", rs))
    ic, is_ = _along(g, im, axis, rank, cos), _along(g, im, axis, rank, sin)
    if inverse:  # (re + i im)(cos + i sin)
        return join(g, g.op("Sub", rc, is_), g.op("Add", ic, rs))
    return join(g, g.op("Add", rc, is_), g.op("Sub", ic, rs))  # (re + i im)(cos - i sin)


def _c2r(g, x, axis: int, n, norm):
    """irfft along ``axis``: n real outputs from the one-sided bins (Hermitian input)."""
    rank = real_rank(x)
    re, im = parts(g, x)
    bins = _length(g, re, axis)
    if n is None:
        n = g.op("Mul", g.op("Sub", bins, i64(g, 1)), i64(g, 2))
    cos, sin, k, _ = _trig(g, bins, n, n, re)
    # Bin k counts twice (itself and its mirror n-k) except 0 and n/2; bins past n//2 unused.
    half = g.op("Div", n, i64(g, 2))
    twice = g.op("And", g.op("Greater", k, i64(g, 0)),
                 g.op("Less", g.op("Mul", k, i64(g, 2)), n))
    once = g.op("Or", g.op("Equal", k, i64(g, 0)),
                g.op("Equal", g.op("Mul", k, i64(g, 2)), n))
    weight = g.op("Add", g.op("Mul", g.op("Cast", twice, to_i=1),
                              g.op("Constant", value_t=torch.tensor(2.0))),
                  g.op("Cast", g.op("And", once, g.op("LessOrEqual", k, half)), to_i=1))
    weight = cast_like(g, sym._unsqueeze_helper(g, weight, [1]), re)
    factor = _scale(g, n, norm, True, re)
    out = _along(g, re, axis, rank, _scaled(g, g.op("Mul", cos, weight), factor))
    if im is not None:
        sin = _scaled(g, g.op("Neg", g.op("Mul", sin, weight)), factor)
        out = g.op("Add", out, _along(g, im, axis, rank, sin))
    return out


def _size(g, value):
    return None if value is None or sym._is_none(value) else scalar_i64(g, value)


def _fft1(kind: str):
    def symbolic(g, self, n, dim, norm):
        _USED.append(f"fft_{kind}")
        axis = real_axis(self, const_int(dim, "fft dim"))
        norm = sym._maybe_get_const(norm, "s") if not sym._is_none(norm) else None
        n = _size(g, n)
        if kind == "irfft":
            return _c2r(g, self, axis, n, norm)
        if kind == "rfft" and is_complex(self):
            refuse("rfft of a complex tensor (torch refuses it too)", self)
        return _c2c(g, self, axis, n, norm, inverse=(kind == "ifft"), onesided=(kind == "rfft"))
    return symbolic


def _dims_and_sizes(g, self, s, dim) -> Tuple[List[int], List[Optional[object]]]:
    rank = real_rank(self)
    sizes = None if s is None or sym._is_none(s) else sym._maybe_get_const(s, "is")
    if sizes is not None and not isinstance(sizes, (list, tuple)):
        refuse("fftn sizes s must be constant to export", self)
    dims = None if dim is None or sym._is_none(dim) else sym._maybe_get_const(dim, "is")
    if dims is not None and not isinstance(dims, (list, tuple)):
        refuse("fftn dim must be constant to export", self)
    if dims is None:
        dims = list(range(rank))[-len(sizes):] if sizes else list(range(rank))
    axes = [real_axis(self, d) for d in dims]
    if sizes is not None and len(sizes) != len(axes):
        refuse(f"fftn s has {len(sizes)} sizes for {len(axes)} dims", self)
    return axes, [None if sizes is None or sizes[i] == -1 else i64(g, sizes[i])
                  for i in range(len(axes))]


def _fftn(kind: str, default_dim: Optional[Sequence[int]] = None):
    def symbolic(g, self, s, dim, norm):
        _USED.append(f"fft_{kind}")
        if default_dim is not None and (dim is None or sym._is_none(dim)):
            dim = i64(g, list(default_dim))
        norm = sym._maybe_get_const(norm, "s") if not sym._is_none(norm) else None
        axes, sizes = _dims_and_sizes(g, self, s, dim)
        x = self
        if kind == "irfftn":
            for axis, n in zip(axes[:-1], sizes[:-1], strict=True):
                x = _c2c(g, x, axis, n, norm, inverse=True)
            return _c2r(g, x, axes[-1], sizes[-1], norm)
        if kind == "rfftn":
            x = _c2c(g, x, axes[-1], sizes[-1], norm, inverse=False, onesided=True)
            pairs = list(zip(axes[:-1], sizes[:-1], strict=True))
        else:
            pairs = list(zip(axes, sizes, strict=True))
        for axis, n in pairs:
            x = _c2c(g, x, axis, n, norm, inverse=(kind == "ifftn"))
        return x
    return symbolic


def _flag(value, default: bool, what: str, like) -> bool:
    if value is None or sym._is_none(value):
        return default
    const = sym._maybe_get_const(value, "b")
    if not isinstance(const, (bool, int)):
        refuse(f"stft {what} must be constant to export", like)
    return bool(const)


def _stft(g, self, n_fft, hop_length=None, win_length=None, window=None, normalized=None,
          onesided=None, return_complex=None):
    """torch.stft without centring (torch.stft pads before calling it): frames x window,
    each frame's DFT. Output [..., bins, frames] as complex pairs, or real pairs with
    ``return_complex=False``."""
    _USED.append("stft")
    if is_complex(self):
        refuse("stft of a complex signal (export takes a real one)", self)
    rank = real_rank(self)
    n = const_int(n_fft, "stft n_fft")
    hop = n // 4 if hop_length is None or sym._is_none(hop_length) else const_int(
        hop_length, "stft hop_length")
    win = n if win_length is None or sym._is_none(win_length) else const_int(
        win_length, "stft win_length")
    if rank not in (1, 2) or n < 1 or hop < 1 or not 0 < win <= n:
        refuse(f"stft of rank {rank} with n_fft {n}, hop_length {hop}, win_length {win} "
               "(torch takes a 1-D or 2-D signal, 0 < win_length <= n_fft, hop >= 1)", self)
    note_dtype(self)
    axis = rank - 1
    frames = g.op("Add", g.op("Div", g.op("Sub", _length(g, self, axis), i64(g, n)),
                              i64(g, hop)), i64(g, 1))
    starts = g.op("Mul", g.op("Range", i64(g, 0), frames, i64(g, 1)), i64(g, hop))
    index = g.op("Add", sym._unsqueeze_helper(g, starts, [1]),
                 sym._unsqueeze_helper(g, g.op("Range", i64(g, 0), i64(g, n), i64(g, 1)),
                                       [0]))
    framed = g.op("Gather", self, index, axis_i=axis)  # [..., frames, n_fft]
    if window is not None and not sym._is_none(window):
        if win < n:  # torch centres a shorter window in n_fft with zeros
            left = (n - win) // 2
            window = g.op("Pad", window, i64(g, [left, n - win - left]))
        framed = g.op("Mul", framed, cast_like(g, window, framed))
    elif win < n:
        ones = cast_like(g, g.op("Constant", value_t=torch.ones(win)), framed)
        left = (n - win) // 2
        framed = g.op("Mul", framed, g.op("Pad", ones, i64(g, [left, n - win - left])))
    bins = n // 2 + 1 if _flag(onesided, True, "onesided", self) else n
    cos, sin, _, _ = _trig(g, i64(g, n), i64(g, bins), i64(g, n), framed)
    if _flag(normalized, False, "normalized", self):
        factor = cast_like(g, g.op("Constant", value_t=torch.tensor(1.0 / math.sqrt(n))),
                           framed)
        cos, sin = g.op("Mul", cos, factor), g.op("Mul", sin, factor)
    perm = list(range(rank - 1)) + [rank, rank - 1]  # [..., frames, bins] -> [..., bins, frames]
    re = g.op("Transpose", g.op("MatMul", framed, cos), perm_i=perm)
    im = g.op("Transpose", g.op("Neg", g.op("MatMul", framed, sin)), perm_i=perm)
    if _flag(return_complex, True, "return_complex", self):
        return join(g, re, im)
    return g.op("Concat", sym._unsqueeze_helper(g, re, [-1]), sym._unsqueeze_helper(g, im, [-1]),
                axis_i=-1)


def _window(g, window, win: int, n: int, like):
    """The window as torch applies it: ones if none, zero-padded about its centre to n."""
    if window is None or sym._is_none(window):
        window = cast_like(g, g.op("Constant", value_t=torch.ones(win)), like)
    else:
        window = cast_like(g, window, like)
    if win < n:
        left = (n - win) // 2
        window = g.op("Pad", window, i64(g, [left, n - win - left]))
    return window


def _overlap_add(g, frames, n: int, hop: int):
    """[B, n, T] frames summed into [B, 1, (T - 1) * hop + n] at the hop's stride."""
    eye = torch.eye(n).reshape(n, 1, n)
    weight = cast_like(g, g.op("Constant", value_t=eye), frames)
    return g.op("ConvTranspose", frames, weight, kernel_shape_i=[n], strides_i=[hop])


def _istft(g, self, n_fft, hop_length=None, win_length=None, window=None, center=None,
           normalized=None, onesided=None, length=None, return_complex=None):
    """torch.istft of complex pairs [B?, bins, T]: a real signal [B?, length]."""
    _USED.append("istft")
    if not is_complex(self):
        refuse("istft of a real tensor (torch takes complex input)", self)
    if _flag(return_complex, False, "return_complex", self):
        refuse("istft with return_complex=True (a complex signal) does not export", self)
    rank = real_rank(self)
    sizes = sym._get_tensor_sizes(self)
    n = const_int(n_fft, "istft n_fft")
    hop = n // 4 if hop_length is None or sym._is_none(hop_length) else const_int(
        hop_length, "istft hop_length")
    win = n if win_length is None or sym._is_none(win_length) else const_int(
        win_length, "istft win_length")
    bins = sizes[-3] if sizes is not None and len(sizes) == rank + 1 else None
    if rank not in (2, 3) or bins is None or not 0 < win <= n or hop < 1:
        refuse(f"istft of rank {rank} with {bins} bins, n_fft {n}, hop_length {hop}, "
               f"win_length {win} (export needs the bins' count)", self)
    two_sided = not _flag(onesided, bins != n, "onesided", self)
    x = self if rank == 3 else cx.mark(sym._unsqueeze_helper(g, self, [0]))
    if two_sided:
        frames = parts(g, _c2c(g, x, 1, i64(g, n), None, inverse=True))[0]
    else:
        frames = _c2r(g, x, 1, i64(g, n), None)  # [B, n, T]
    if _flag(normalized, False, "normalized", self):
        frames = g.op("Mul", frames, cast_like(
            g, g.op("Constant", value_t=torch.tensor(math.sqrt(n))), frames))
    w = _window(g, window, win, n, frames)
    column = sym._unsqueeze_helper(g, w, [1])  # [n, 1]
    signal = _overlap_add(g, g.op("Mul", frames, column), n, hop)
    count = g.op("Gather", g.op("Shape", frames), i64(g, [2]), axis_i=0)
    squares = g.op("Expand", sym._unsqueeze_helper(g, g.op("Mul", column, column), [0]),
                   g.op("Concat", i64(g, [1, n]), count, axis_i=0))
    signal = sym._squeeze_helper(g, g.op("Div", signal, _overlap_add(g, squares, n, hop)),
                                 [1])  # [B, L]
    start = n // 2 if _flag(center, True, "center", self) else 0
    if length is not None and not sym._is_none(length):
        end = start + const_int(length, "istft length")
        short = g.op("Max", i64(g, [0]), g.op("Sub", i64(g, [end]), g.op(
            "Gather", g.op("Shape", signal), i64(g, [1]), axis_i=0)))
        signal = g.op("Pad", signal, g.op("Concat", i64(g, [0, 0, 0]), short, axis_i=0))
        signal = g.op("Slice", signal, i64(g, [start]), i64(g, [end]), i64(g, [1]))
    else:
        stop = -start if start else 2 ** 62
        signal = g.op("Slice", signal, i64(g, [start]), i64(g, [stop]), i64(g, [1]))
    return signal if rank == 3 else sym._squeeze_helper(g, signal, [0])


_FFT = {
    "aten::stft": _stft,
    "aten::istft": _istft,
    "aten::fft_fft": _fft1("fft"), "aten::fft_ifft": _fft1("ifft"),
    "aten::fft_rfft": _fft1("rfft"), "aten::fft_irfft": _fft1("irfft"),
    "aten::fft_fftn": _fftn("fftn"), "aten::fft_ifftn": _fftn("ifftn"),
    "aten::fft_rfftn": _fftn("rfftn"), "aten::fft_irfftn": _fftn("irfftn"),
    "aten::fft_fft2": _fftn("fftn", (-2, -1)), "aten::fft_ifft2": _fftn("ifftn", (-2, -1)),
    "aten::fft_rfft2": _fftn("rfftn", (-2, -1)), "aten::fft_irfft2": _fftn("irfftn", (-2, -1)),
}


def symbolics(opsets: Sequence[int]) -> Dict[str, Tuple[Callable, List[int]]]:
    """``{aten name: (symbolic, opsets)}`` for the transforms and the complex ops."""
    _USED.clear()
    found = cx.symbolics(opsets)
    found.update({name: (fn, list(opsets)) for name, fn in _FFT.items()})
    return found


def used() -> List[str]:
    """The fft ops the last export block exported, in order."""
    return list(_USED)
