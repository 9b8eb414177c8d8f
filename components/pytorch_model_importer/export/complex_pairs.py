"""Complex tensors during torch.onnx.export, carried as real (re, im) pairs.

ONNX has no complex tensors, and torch 2.5's TorchScript exporter has no
symbolic for complex arithmetic. While spectral.py's transforms are
registered, a complex tensor is a real one with a trailing axis of 2
(real, imaginary): the layout ``torch.view_as_real`` uses. This module keeps
which values are pairs and exports the ops models apply to them: ``real``,
``imag``, ``abs``, ``conj``, ``complex``, ``polar``, ``view_as_real`` /
``view_as_complex``, ``mul``/``add``/``sub``/``rsub``/``div`` and the layout
ops ``slice``/``select``/``transpose``/``permute``/``unsqueeze``. On real
tensors each of the wrapped ops keeps torch's own symbolic.

Which values are pairs is tracked by value id during the export: ONNX shape
inference types the pair layout as float. An op not covered here, given a
complex value, sees the pair layout as a real tensor; the importer's
verification against torch catches the difference and names the node.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Set, Tuple

import torch
from torch.onnx import symbolic_helper as sym

from tfx_bridge.components.pytorch_model_importer.export.registry import TorchSymbolics

_COMPLEX: Set[str] = set()  # ids of values holding a complex tensor as (re, im) pairs
_TORCH = TorchSymbolics()  # torch's own symbolic for each wrapped op
_PAIR_DTYPE = [torch.float32]  # a model mixes complex64 and complex128 rarely: one per export


def refuse(what: str, value) -> None:
    raise torch.onnx.errors.SymbolicValueError(what, value)


def is_complex(value) -> bool:
    return value is not None and sym._is_value(value) and value.unique() in _COMPLEX


def mark(value):
    """Records ``value`` as complex pairs and types it as real.

    Typed explicitly: where ONNX shape inference gives no dtype (dynamic
    sizes), the exporter would copy the traced value's complex dtype onto it,
    and the next node's inference refuses complex types.
    """
    _COMPLEX.add(value.unique())
    if isinstance(value.type(), torch._C.TensorType):
        value.setType(value.type().with_dtype(_PAIR_DTYPE[0]))
    return value


def note_dtype(x) -> None:
    """The float dtype of the pairs, from a transform's real input (complex64 by default)."""
    if not is_complex(x):
        kind = sym._type_utils.JitScalarType.from_value(x, sym._type_utils.JitScalarType.FLOAT)
        _PAIR_DTYPE[0] = torch.float64 if kind == sym._type_utils.JitScalarType.DOUBLE \
            else torch.float32


def default(name: str):
    """torch's own symbolic for ``name`` at the export's opset (real tensors)."""
    def call(g, *args):
        return _TORCH.call(name, g, *args)
    return call


def i64(g, value):
    return g.op("Constant", value_t=torch.tensor(value, dtype=torch.int64))


def scalar_i64(g, value):
    """An int64 scalar value from a traced size (constant or dynamic)."""
    const = sym._maybe_get_const(value, "i")
    if isinstance(const, int):
        return i64(g, const)
    return g.op("Reshape", g.op("Cast", value, to_i=7), i64(g, []))


def const_int(value, what: str) -> int:
    const = sym._maybe_get_const(value, "i")
    if not isinstance(const, int):
        refuse(f"{what} must be a constant int to export", value)
    return const


def cast_like(g, value, like):
    """``value`` (float32) cast to ``like``'s float type (float32 below opset 15)."""
    if sym.GLOBALS.export_onnx_opset_version >= 15:
        return g.op("CastLike", value, like)
    return value


def parts(g, x):
    """(real, imaginary) of a complex pair tensor; (x, None) for a real one."""
    if not is_complex(x):
        return x, None
    return (g.op("Gather", x, i64(g, 0), axis_i=-1),
            g.op("Gather", x, i64(g, 1), axis_i=-1))


def join(g, re, im):
    if im is None:
        im = g.op("Mul", re, cast_like(g, g.op("Constant", value_t=torch.tensor(0.0)), re))
    return mark(g.op("Concat", sym._unsqueeze_helper(g, re, [-1]),
                      sym._unsqueeze_helper(g, im, [-1]), axis_i=-1))


def real_rank(x) -> int:
    """The rank of the tensor ``x`` holds (without the pair axis of a complex one)."""
    rank = sym._get_tensor_rank(x)
    if rank is None:
        refuse("torch.fft export needs the input's rank", x)
    return rank - 1 if is_complex(x) else rank


def real_axis(x, dim: int) -> int:
    rank = real_rank(x)
    if not -rank <= dim < rank:
        refuse(f"dim {dim} out of range for rank {rank}", x)
    return dim % rank


# ------------------------------------------------------------------ complex elementwise

def _real(g, self):
    return parts(g, self)[0] if is_complex(self) else self


def _imag(g, self):
    if not is_complex(self):
        refuse("imag of a real tensor (torch refuses it too)", self)
    return parts(g, self)[1]


def _abs(g, self):
    if not is_complex(self):
        return default("aten::abs")(g, self)
    re, im = parts(g, self)
    return g.op("Sqrt", g.op("Add", g.op("Mul", re, re), g.op("Mul", im, im)))


def _conj(name: str):
    def symbolic(g, self):
        if not is_complex(self):  # a real tensor is its own conjugate
            return self
        re, im = parts(g, self)
        return join(g, re, g.op("Neg", im))
    return symbolic


def _view_as_real(g, self):
    return g.op("Identity", self)  # the pair layout is view_as_real's: no longer complex


def _view_as_complex(g, self):
    note_dtype(self)
    return mark(g.op("Identity", self))


def _complex(g, real, imag):
    note_dtype(real)
    return join(g, real, imag)


def _polar(g, magnitude, angle):
    note_dtype(magnitude)
    return join(g, g.op("Mul", magnitude, g.op("Cos", angle)),
                 g.op("Mul", magnitude, g.op("Sin", angle)))


def _alpha(g, other, alpha):
    """``alpha * other`` (add/sub/rsub's scale); ``other`` itself when alpha is 1."""
    if alpha is None or sym._is_none(alpha):
        return other
    value = sym._maybe_get_const(alpha, "f")
    if isinstance(value, (int, float)) and value == 1:
        return other
    scaled = g.op("Mul", other, g.op("CastLike", alpha, other))
    return mark(scaled) if is_complex(other) else scaled


def _binary(name: str):
    def symbolic(g, self, other, *rest):
        if not (is_complex(self) or is_complex(other)):
            return default(name)(g, self, other, *rest)
        if name == "aten::rsub":  # other - alpha * self
            return _binary("aten::sub")(g, other, _alpha(g, self, rest[0] if rest else None))
        if name in ("aten::add", "aten::sub") and rest:
            other = _alpha(g, other, rest[0])
        elif rest and not all(sym._is_none(r) for r in rest):
            refuse(f"{name} with a rounding mode on a complex tensor", self)
        a, b = parts(g, self)
        c, d = parts(g, other)
        if name == "aten::mul":
            if b is None or d is None:  # real x complex: scale both parts
                real, pair = (a, other) if b is None else (c, self)
                return mark(g.op("Mul", pair, sym._unsqueeze_helper(g, real, [-1])))
            return join(g, g.op("Sub", g.op("Mul", a, c), g.op("Mul", b, d)),
                         g.op("Add", g.op("Mul", a, d), g.op("Mul", b, c)))
        if name in ("aten::add", "aten::sub"):
            op = "Add" if name == "aten::add" else "Sub"
            im = (b if d is None else (g.op("Neg", d) if b is None and op == "Sub" else d)
                  if b is None or d is None else g.op(op, b, d))
            return join(g, g.op(op, a, c), im)
        # div: (a + bi) / (c + di) = ((ac + bd) + (bc - ad)i) / (c^2 + d^2)
        if d is None:
            return mark(g.op("Div", self, sym._unsqueeze_helper(g, c, [-1])))
        if b is None:  # real / complex: a zero imaginary part
            b = g.op("Mul", a, cast_like(g, g.op("Constant", value_t=torch.tensor(0.0)), a))
        denom = g.op("Add", g.op("Mul", c, c), g.op("Mul", d, d))
        return join(g, g.op("Div", g.op("Add", g.op("Mul", a, c), g.op("Mul", b, d)), denom),
                     g.op("Div", g.op("Sub", g.op("Mul", b, c), g.op("Mul", a, d)), denom))
    return symbolic


# ------------------------------------------------------------------ complex layout ops

def _transpose(g, self, dim0, dim1):
    if not is_complex(self):
        return default("aten::transpose")(g, self, dim0, dim1)
    rank = real_rank(self)
    perm = list(range(rank + 1))
    a = real_axis(self, const_int(dim0, "transpose dim"))
    b = real_axis(self, const_int(dim1, "transpose dim"))
    perm[a], perm[b] = perm[b], perm[a]
    return mark(g.op("Transpose", self, perm_i=perm))


def _permute(g, self, dims):
    if not is_complex(self):
        return default("aten::permute")(g, self, dims)
    order = sym._maybe_get_const(dims, "is")
    if not isinstance(order, (list, tuple)):
        refuse("permute dims must be constant to export", self)
    rank = real_rank(self)
    return mark(g.op("Transpose", self, perm_i=[real_axis(self, d) for d in order] + [rank]))


def _unsqueeze(g, self, dim):
    if not is_complex(self):
        return default("aten::unsqueeze")(g, self, dim)
    rank = real_rank(self)
    axis = const_int(dim, "unsqueeze dim") % (rank + 1)
    return mark(sym._unsqueeze_helper(g, self, [axis]))


def _select(g, self, dim, index):
    if not is_complex(self):
        return default("aten::select")(g, self, dim, index)
    axis = real_axis(self, const_int(dim, "select dim"))
    return mark(g.op("Gather", self, scalar_i64(g, index), axis_i=axis))


def _slice(g, self, *args):
    if not is_complex(self) or len(args) != 4:
        return default("aten::slice")(g, self, *args)
    axis = real_axis(self, const_int(args[0], "slice dim"))
    return mark(default("aten::slice")(g, self, i64(g, axis), *args[1:]))


_COMPLEX_OPS = {
    "aten::real": _real, "aten::imag": _imag, "aten::complex": _complex,
    "aten::polar": _polar, "aten::view_as_real": _view_as_real,
    "aten::view_as_complex": _view_as_complex,
}
# Ops with a torch symbolic of their own: ours handles complex values, torch's the rest.
_WRAPPED = {
    "aten::abs": _abs, "aten::conj": _conj("aten::conj"),
    "aten::_conj": _conj("aten::_conj"), "aten::conj_physical": _conj("aten::conj_physical"),
    "aten::mul": _binary("aten::mul"), "aten::add": _binary("aten::add"),
    "aten::sub": _binary("aten::sub"), "aten::rsub": _binary("aten::rsub"),
    "aten::div": _binary("aten::div"),
    "aten::transpose": _transpose, "aten::permute": _permute,
    "aten::unsqueeze": _unsqueeze, "aten::select": _select, "aten::slice": _slice,
}


def symbolics(opsets: Sequence[int]) -> Dict[str, Tuple[Callable, List[int]]]:
    """``{aten name: (symbolic, opsets)}`` for registry.registered; resets the block's state.

    Call before registering: torch's own symbolic for each wrapped op is looked
    up now, while it is still the one registered.
    """
    _COMPLEX.clear()
    _PAIR_DTYPE[0] = torch.float32
    _TORCH.capture(_WRAPPED, opsets)
    found: Dict[str, Tuple[Callable, List[int]]] = {
        name: (fn, list(opsets)) for name, fn in _COMPLEX_OPS.items()}
    found.update({name: (fn, list(opsets)) for name, fn in _WRAPPED.items()})
    return found
