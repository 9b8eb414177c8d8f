"""A rewrite of the exported graph, as the import report names it, and how a node of
that graph is named in messages (its op, node and the PyTorch module it came from).

Both the export stage (export/) and the onnx2tf fallback (onnx2tf/) record their
rewrites as :class:`Rewrite`; every conversion error names its node with
:func:`describe_node`. No TFX imports.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """One rewrite applied to the graph: its kind and the nodes it touched."""

    kind: str
    nodes: List[str]
    why: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "nodes": list(self.nodes), "why": self.why}


def module_types(module, prefix: str = "") -> Dict[str, str]:
    """Exported scope name -> ``'qualified.name' (Class)`` for every submodule.

    ``prefix`` is the wrapper attribute the export added in front of every
    name (swaps.Positional); the description shows the user's own names.
    TorchScript modules report their original class.
    """
    if module is None:
        return {}
    out = {}
    for name, m in module.named_modules():
        cls = getattr(m, "original_name", None) or type(m).__name__
        if name:
            out[prefix + name] = f"module {name!r} ({cls})"
        elif prefix:
            out[prefix.rstrip(".")] = f"the model's own forward ({cls})"
    return out


def scope_of(node_name: str, types: Dict[str, str]) -> str:
    """The PyTorch module an exported node came from, or '' if unknown.

    The TorchScript exporter names nodes ``/<outer>/<outer.inner>/<Op>``: the
    segment before the op is the module's qualified name.
    """
    parts = [p for p in (node_name or "").split("/") if p]
    if len(parts) < 2:
        return ""
    # Nested modules give one segment per attribute (/model/features/pool/MaxPool) or
    # the qualified name at once (/0/Loop): try the joined path, then the last segment.
    for key in (".".join(parts[:-1]), parts[-2]):
        if key in types:
            return types[key]
    return f"module {'.'.join(parts[:-1])!r}"


def describe_node(op: str, node_name: str, types: Dict[str, str]) -> str:
    """``ONNX op X (node N, from module M)``, the form every conversion error uses."""
    scope = scope_of(node_name, types)
    return f"ONNX op {op} (node {node_name or '(unnamed)'}{', from ' + scope if scope else ''})"
