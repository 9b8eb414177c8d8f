"""The converter's errors: a node it cannot convert, and every such node of a graph.

:class:`Unsupported` is raised by an op handler (and by the interpreter) for one
node; :func:`tfx_bridge.onnx_tf.core.convert` collects them as :class:`Problem` s
and raises :class:`ConversionFailed` once, naming every node. Neither helps on a
retry: the model has to change (each problem's ``fix`` says how).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence


class OnnxTfError(Exception):
    """Every error this package raises on purpose."""


class Unsupported(OnnxTfError):
    """An op, attribute value or input this converter does not implement.

    ``variant`` says what exactly (an attribute value, a dtype, a run-time
    value that must be a constant); ``fix`` what to change in the model.
    """

    def __init__(self, variant: str, fix: str = ""):
        super().__init__(variant)
        self.variant = variant
        self.fix = fix


@dataclasses.dataclass
class Problem:
    """One node the converter cannot convert, with everything a message needs."""

    op_type: str
    node: str
    variant: str
    fix: str = ""
    shapes: str = ""

    def describe(self, scope: str = "") -> str:
        where = f"node {self.node or '(unnamed)'}" + (f", from {scope}" if scope else "")
        text = f"ONNX op {self.op_type} ({where}): {self.variant}"
        if self.shapes:
            text += f" [inputs {self.shapes}]"
        fix = self.fix[:1].upper() + self.fix[1:] if self.fix else ""
        return text + (f". {fix}" if fix else "")


class ConversionFailed(OnnxTfError):
    """Raised by :func:`convert` with every problem found (collected, then raised once)."""

    def __init__(self, problems: Sequence[Problem]):
        super().__init__("; ".join(p.describe() for p in problems))
        self.problems = list(problems)
