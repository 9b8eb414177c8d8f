"""What the converter would refuse, found from the graph alone before anything is
traced (op types, domains, attributes, variants, element types), and what a
handler's ``check`` function sees of a node (:class:`NodeInfo`). No TFX imports.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, List, Optional

from tfx_bridge.onnx_tf.dtypes import DTYPE_ATTRS, NARROW_TYPE_OPS, NARROW_TYPES, NP_TYPES
from tfx_bridge.onnx_tf.errors import Problem
from tfx_bridge.onnx_tf.registry import (
    DEFAULT_FIX,
    ONNX_DOMAINS,
    OP_FIXES,
    REGISTRY,
    REQUIRED,
)


@dataclasses.dataclass
class NodeInfo:
    """What is known about a node before tracing (for ``check`` functions)."""

    op_type: str
    name: str
    attrs: Dict[str, Any]
    opset: int
    num_inputs: int
    input_types: List[Optional[int]]  # ONNX elem types where known


def attr_value(attr) -> Any:
    from onnx import helper
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value


def iter_nodes(graph) -> Iterable:
    """Every node, those inside If/Loop/Scan bodies too."""
    from onnx import AttributeProto
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from iter_nodes(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from iter_nodes(g)


def _types_by_name(model) -> Dict[str, int]:
    types = {}
    graph = model.graph
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    for init in graph.initializer:
        types[init.name] = init.data_type
    return types


def check_model(model) -> List[Problem]:
    """Every node this converter would refuse, found from the graph alone (op types,
    domains, attributes, variants, element types); empty when all are claimed."""
    from tfx_bridge.onnx_tf import ops  # noqa: F401  (registers every handler)

    opset = next((o.version for o in model.opset_import if o.domain in ONNX_DOMAINS), 0)
    types = _types_by_name(model)
    problems = []
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type"):
            problems.append(Problem("(graph)", vi.name, "a non-tensor graph input or output "
                                    "(sequence, map or optional)", "use plain tensors"))
    for node in iter_nodes(model.graph):
        definition = REGISTRY.get(node.op_type)
        if node.domain not in ONNX_DOMAINS:
            problems.append(Problem(node.op_type, node.name,
                                    f"custom domain {node.domain!r} is not supported",
                                    "export with standard ONNX ops only"))
            continue
        if definition is None:
            problems.append(Problem(node.op_type, node.name, "no converter for this op",
                                    OP_FIXES.get(node.op_type, DEFAULT_FIX)))
            continue
        if opset < definition.since:
            problems.append(Problem(node.op_type, node.name,
                                    f"opset {opset} is older than {definition.since}, the "
                                    "oldest this converter implements", "export at opset "
                                    f">= {max(definition.since, 13)}"))
            continue
        unknown = sorted(a.name for a in node.attribute if a.name not in definition.attrs)
        if unknown:
            problems.append(Problem(node.op_type, node.name,
                                    f"attribute(s) {unknown} are not supported",
                                    "export without them"))
            continue
        for name, default in definition.attrs.items():
            if default is REQUIRED and name not in {a.name for a in node.attribute}:
                problems.append(Problem(node.op_type, node.name,
                                        f"required attribute {name!r} is missing"))
        import onnx
        bad_types = []
        narrow_ok = node.op_type in NARROW_TYPE_OPS
        for name in list(node.input) + list(node.output):
            elem = types.get(name)
            if elem and elem not in NP_TYPES and not (narrow_ok and elem in NARROW_TYPES):
                bad_types.append(f"{name}: {onnx.TensorProto.DataType.Name(elem)}")
        for a in node.attribute:  # a dtype attribute asking another op for a narrow type
            if (not narrow_ok and a.name in DTYPE_ATTRS and a.type == onnx.AttributeProto.INT
                    and a.i in NARROW_TYPES):
                bad_types.append(f"{a.name}={onnx.TensorProto.DataType.Name(a.i)}")
        if bad_types:
            problems.append(Problem(node.op_type, node.name,
                                    f"element type(s) not supported ({', '.join(bad_types)})",
                                    "use float32/float64/float16 or integer/bool tensors"))
            continue
        if definition.check is not None:
            attrs = {k: v for k, v in definition.attrs.items() if v is not REQUIRED}
            attrs.update({a.name: attr_value(a) for a in node.attribute})
            info = NodeInfo(node.op_type, node.name, attrs, opset, len(node.input),
                            [types.get(n) for n in node.input])
            refusal = definition.check(info)
            if refusal:
                problems.append(Problem(node.op_type, node.name, refusal))
    return problems
