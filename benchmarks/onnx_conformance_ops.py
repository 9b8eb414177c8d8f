"""Which ONNX ops torch emits and which op a node-test case belongs to, for
``onnx_conformance.py``: the op types the TorchScript exporter can emit at opsets
<= 17 (read from torch's own source), each case's graph ops and opset, and the op
a case counts under (by name, ONNX's own shortenings in :data:`ALIASES`, else the
graph's only op).
"""
from __future__ import annotations

import collections
import glob
import os
import re
from typing import Dict, Iterable, Set

import onnx_conformance_tool as conformance

TORCH_OPSETS = range(7, 18)  # the TorchScript exporter's symbolic_opset7..17
# Helpers in torch/onnx that create an ONNX node from a name given as their argument.
_TORCH_OP_CALLS = re.compile(
    r"""(?:\bg\.op|add_op_with_blocks)\(\s*(?:g\s*,\s*)?["'](?:onnx::)?([A-Za-z0-9_]+)["']""")
# Case-name stems that are not the op's snake_case name (ONNX's own test naming).
ALIASES = {
    "batchnorm": "BatchNormalization", "instancenorm": "InstanceNormalization",
    "sce": "SoftmaxCrossEntropyLoss", "nllloss": "NegativeLogLikelihoodLoss",
    "mvn": "MeanVarianceNormalization", "greater_equal": "GreaterOrEqual",
    "less_equal": "LessOrEqual", "tril": "Trilu", "triu": "Trilu",
    "training_dropout": "Dropout", "simple_rnn": "RNN", "basic_conv": "Conv",
    "basic_deform_conv": "DeformConv", "constant_pad": "Pad", "edge_pad": "Pad",
    "reflect_pad": "Pad", "wrap_pad": "Pad", "strnorm": "StringNormalizer",
    "strnormalizer": "StringNormalizer", "nesterov_momentum": "Momentum",
}


# --------------------------------------------------------------------------- which ops torch emits


def torch_emitted_ops() -> tuple:
    """ONNX op types the TorchScript exporter can emit at opsets <= 17, and the files read.

    A regex over the source text of torch/onnx/symbolic_opset{7..17}.py,
    symbolic_helper.py and the other top-level torch/onnx modules (not _internal, the
    dynamo exporter): every ``g.op("Name"``/``g.op("onnx::Name"`` and
    ``add_op_with_blocks(g, "Name"`` (If, Loop) whose name is an ai.onnx op. Custom
    domains (``prim::``, ``aten::``, ``com.microsoft::``) do not match the pattern or
    are not ai.onnx op names.
    """
    import onnx
    import torch

    onnx_ops = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == ""}
    root = os.path.join(os.path.dirname(torch.__file__), "onnx")
    files = []
    for path in sorted(glob.glob(os.path.join(root, "*.py"))):
        m = re.match(r"symbolic_opset(\d+)\.py$", os.path.basename(path))
        if m and int(m.group(1)) not in TORCH_OPSETS:
            continue
        files.append(path)
    ops: Set[str] = set()
    for path in files:
        with open(path) as f:
            ops.update(n for n in _TORCH_OP_CALLS.findall(f.read()) if n in onnx_ops)
    return ops, [os.path.relpath(p, os.path.dirname(root)) for p in files], torch.__version__


# --------------------------------------------------------------------------- case -> op


def _snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    return re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s).lower()


def case_stems() -> Dict[str, Set[str]]:
    import onnx
    stems: Dict[str, Set[str]] = collections.defaultdict(set)
    for schema in onnx.defs.get_all_schemas_with_history():
        for stem in (_snake(schema.name), schema.name.lower()):
            stems[stem].add(schema.name)
    for stem, name in ALIASES.items():
        stems[stem].add(name)
    return stems


def graph_ops(case: str) -> tuple:
    """(op types in the case's graph, subgraphs too; its ai.onnx opset)."""
    import onnx

    from tfx_bridge.onnx_tf.check import iter_nodes
    from tfx_bridge.onnx_tf.registry import ONNX_DOMAINS
    model = onnx.load(os.path.join(conformance.node_test_root(), case, "model.onnx"))
    opset = next((o.version for o in model.opset_import if o.domain in ONNX_DOMAINS), 0)
    return sorted({n.op_type for n in iter_nodes(model.graph)}), opset


def case_op(case: str, ops: Iterable[str], stems: Dict[str, Set[str]]) -> tuple:
    """(op, how) for a case: the longest op stem its name starts with (followed by
    ``_``, a digit or the end) whose op is in the graph; an ``_expanded`` case goes to the
    op it expands (its graph holds the function body). Else the graph's only op."""
    body = case[len("test_"):]
    expanded = "_expanded" in body
    stem_of = body.split("_expanded")[0] if expanded else body
    ops = set(ops)
    best = None
    for stem, names in stems.items():
        if stem_of == stem or re.match(re.escape(stem) + r"(_|\d)", stem_of):
            for name in names:
                if (expanded or name in ops) and (best is None or len(stem) > best[0]):
                    best = (len(stem), name)
    if best:
        return best[1], "name"
    real = ops - {"Constant"}
    if len(real) == 1:
        return real.pop(), "graph"
    return "(unassigned)", "none"

