"""Bitwise ``& | ^ ~`` on integer tensors for torch.onnx.export.

torch 2.5 exports these on bool tensors only and refuses integers ("ONNX
export does NOT support exporting bitwise OR for non-boolean input values"):
CPM-Ant builds its attention mask as ``context | (~context & causal)`` on
int64 ids, feature-hashing code XORs ids. ONNX has BitwiseAnd/Or/Xor only from
opset 18, and the default opset is 17, so they are exported exactly with
integer arithmetic:

- int with bool: only the lowest bit of the int meets the bool, and
  ``x mod 2`` (ONNX Mod, floor semantics) is that bit for negative ints too:
  ``a & b = b * (a mod 2)``, ``a | b = a + b * (1 - a mod 2)``,
  ``a ^ b = a + b * (1 - 2 * (a mod 2))``;
- int with int: bit by bit over the dtype's width, each bit taken by an exact
  floor halving, the top bit weighted ``-2**(w-1)`` for signed types (two's
  complement);
- ``~x`` on ints is ``-x - 1`` (``255 - x`` for uint8).

Bool with bool keeps torch's And/Or/Xor/Not.
"""
from __future__ import annotations

from typing import Dict, List

import torch
from torch.onnx import symbolic_helper as sym

from tfx_bridge.components.pytorch_model_importer.export.registry import TorchSymbolics

BITWISE_ARITHMETIC = "bitwise-integer-arithmetic"  # the report's rewrite kind
_OPS = {"aten::__and_": "and", "aten::bitwise_and": "and", "aten::__or_": "or",
        "aten::bitwise_or": "or", "aten::__xor_": "xor", "aten::bitwise_xor": "xor"}
_NOT = ("aten::bitwise_not",)
_INTS = {torch.uint8: 8, torch.int8: 8, torch.int16: 16, torch.int32: 32, torch.int64: 64}

_USED: List[str] = []
_TORCH = TorchSymbolics()  # torch's own symbolic for the bool cases


def _dtype(value):
    kind = sym._type_utils.JitScalarType.from_value(
        value, sym._type_utils.JitScalarType.UNDEFINED)
    if kind == sym._type_utils.JitScalarType.UNDEFINED:
        return None
    return kind.dtype()


def _const(g, value, dtype):
    return g.op("Constant", value_t=torch.tensor(value, dtype=dtype))


def _onnx_type(dtype) -> int:
    return sym._type_utils.JitScalarType.from_dtype(dtype).onnx_type()


def _with_bool(g, kind: str, a, b, dtype):
    """``a`` int, ``b`` bool: only a's lowest bit meets b."""
    b = g.op("Cast", b, to_i=_onnx_type(dtype))
    low = g.op("Mod", a, _const(g, 2, dtype), fmod_i=0)
    one = _const(g, 1, dtype)
    if kind == "and":
        return g.op("Mul", b, low)
    if kind == "or":
        return g.op("Add", a, g.op("Mul", b, g.op("Sub", one, low)))
    flip = g.op("Sub", one, g.op("Mul", _const(g, 2, dtype), low))
    return g.op("Add", a, g.op("Mul", b, flip))


def _bits(g, kind: str, a, b, dtype):
    """``a op b`` bit by bit over dtype's width (both int64 in the graph)."""
    width = _INTS[dtype]
    i64 = torch.int64
    a = g.op("Cast", a, to_i=_onnx_type(i64))
    b = g.op("Cast", b, to_i=_onnx_type(i64))
    two = _const(g, 2, i64)
    total = None
    for k in range(width):
        bit_a = g.op("Mod", a, two, fmod_i=0)
        bit_b = g.op("Mod", b, two, fmod_i=0)
        both = g.op("Mul", bit_a, bit_b)
        if kind == "and":
            bit = both
        elif kind == "or":
            bit = g.op("Sub", g.op("Add", bit_a, bit_b), both)
        else:
            bit = g.op("Sub", g.op("Add", bit_a, bit_b), g.op("Mul", two, both))
        top = k == width - 1 and dtype != torch.uint8
        weight = -(2 ** k) if top else 2 ** k
        term = g.op("Mul", bit, _const(g, weight, i64))
        total = term if total is None else g.op("Add", total, term)
        if k < width - 1:  # floor halving: exact, negative values included
            a = g.op("Div", g.op("Sub", a, bit_a), two)
            b = g.op("Div", g.op("Sub", b, bit_b), two)
    return g.op("Cast", total, to_i=_onnx_type(dtype))


def _binary(name: str):
    kind = _OPS[name]

    def symbolic(g, self, other):
        left, right = _dtype(self), _dtype(other)
        if sym._is_bool(self) and sym._is_bool(other) or left is None or right is None:
            return _TORCH.call(name, g, self, other)
        if left == torch.bool or right == torch.bool:
            a, b = (other, self) if left == torch.bool else (self, other)
            dtype = right if left == torch.bool else left
            if dtype not in _INTS:
                return _TORCH.call(name, g, self, other)
            _USED.append(f"{kind} with bool")
            return _with_bool(g, kind, a, b, dtype)
        dtype = torch.promote_types(left, right)
        if dtype not in _INTS:
            return _TORCH.call(name, g, self, other)
        _USED.append(f"{kind} {dtype}".replace("torch.", ""))
        return _bits(g, kind, self, other, dtype)
    return symbolic


def _bitwise_not(g, self):
    dtype = _dtype(self)
    if dtype not in _INTS:
        return _TORCH.call("aten::bitwise_not", g, self)
    _USED.append("not")
    if dtype == torch.uint8:
        return g.op("Sub", _const(g, 255, dtype), self)
    return g.op("Sub", g.op("Neg", self), _const(g, 1, dtype))




def symbolics(opsets) -> Dict[str, tuple]:
    """``{aten name: (symbolic, opsets)}``; torch's own looked up before registering."""
    _USED.clear()
    _TORCH.capture(list(_OPS) + list(_NOT), opsets)
    return {name: (_bitwise_not if name in _NOT else _binary(name), list(opsets))
            for name in list(_OPS) + list(_NOT)}


def used() -> List[str]:
    return list(_USED)
