"""torch.onnx's symbolic registry during an export: ours registered for a block,
torch's own kept for the calls ours leave to it.

A replacement symbolic (symbolic_rewrites.py and the modules it registers)
often handles only some calls of an aten op (complex values, integer operands,
one repeat count) and leaves the rest to torch. Registering ours hides torch's
in the registry, so :meth:`TorchSymbolics.capture` looks them up first, per op
and opset, and :meth:`TorchSymbolics.call` runs the one for the export's opset
(torch's "unsupported" error where torch has none). :func:`registered`
registers ours for the duration of a block.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Dict, Iterable, Iterator, List, Sequence, Tuple

import torch
from torch.onnx import symbolic_helper as sym
from torch.onnx._internal import registration

# torch.onnx dispatches to the closest registered opset at or below the target:
# the symbolics are registered at every opset so they win over the built-in
# embedding_bag (a Loop, registered at 10 and 11).
OPSETS = tuple(range(9, 21))


class TorchSymbolics:
    """torch's symbolic per (aten name, opset), captured before ours are registered.

    Example::

        torch_symbolics = TorchSymbolics()
        torch_symbolics.capture(["aten::mul"], range(14, 18))
        # inside a replacement symbolic, for the calls it leaves to torch:
        # return torch_symbolics.call("aten::mul", g, self, other)
    """

    def __init__(self) -> None:
        self._found: Dict[Tuple[str, int], Callable] = {}

    def capture(self, names: Iterable[str], opsets: Iterable[int]) -> None:
        """Forgets the last block's, then records torch's symbolic for each name/opset."""
        self._found.clear()
        opsets = list(opsets)
        for name in names:
            group = registration.registry.get_function_group(name)
            for opset in opsets:
                fn = group.get(opset) if group is not None else None
                if fn is not None:
                    self._found[(name, opset)] = fn

    def call(self, name: str, g, *args):
        """torch's symbolic for ``name`` at the export's opset, on ``args``."""
        fn = self._found.get((name, sym.GLOBALS.export_onnx_opset_version))
        if fn is None:
            return sym._onnx_unsupported(name, args[0] if args else None)
        return fn(g, *args)


@contextlib.contextmanager
def registered(symbolics: Dict[str, Tuple[object, Sequence[int]]]) -> Iterator[None]:
    """Registers each ``{aten name: (symbolic, opsets)}`` for the block, then
    unregisters them (torch's built-in symbolic is back after the block)."""
    done: List[Tuple[str, int]] = []
    try:
        for name, (fn, opsets) in symbolics.items():
            for opset in opsets:
                torch.onnx.register_custom_op_symbolic(name, fn, opset)
                done.append((name, opset))
        yield
    finally:
        for name, opset in done:
            torch.onnx.unregister_custom_op_symbolic(name, opset)
