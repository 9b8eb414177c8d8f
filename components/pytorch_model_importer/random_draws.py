"""Random draws in a model's forward: the cause named when a stochastic model does not
verify.

A model that samples in its forward (VITS's noise in its flow and duration
predictor, a sampling head, dropout left in training mode) computes something else
on every run, so no conversion of it can be checked against torch or onnxruntime:
each reference run is a new draw. When checks fail, the exported ONNX is searched
for random ops (subgraphs included), and the reference is run twice on the same
input (onnxruntime's two runs share a session: a seeded node repeats its draw in
a new one). Where it differs from itself and the graph draws, the report names each
drawing node, its op and the module it came from, and the fix: make the draw
deterministic before handing the model over (its scale set to 0, or the noise
passed in as an input). No TFX imports.

>>> import onnx
>>> from onnx import helper
>>> node = helper.make_node("RandomNormalLike", ["x"], ["n"], name="/flow/RandomNormalLike")
>>> graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
...                           [helper.make_tensor_value_info("n", 1, [2])])
>>> random_nodes(helper.make_model(graph))
[('RandomNormalLike', '/flow/RandomNormalLike')]
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

RANDOM_OPS = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
              "Bernoulli", "Multinomial")


def random_nodes(model) -> List[Tuple[str, str]]:
    """(op, node name) of every random op in an ONNX ModelProto, subgraphs included;
    Dropout counts where its ``training_mode`` input is given (it may then draw)."""
    found: List[Tuple[str, str]] = []

    def visit(graph):
        for node in graph.node:
            draws = node.op_type in RANDOM_OPS or (
                node.op_type == "Dropout" and len(node.input) > 2 and node.input[2])
            if draws:
                found.append((node.op_type, node.name))
            for attr in node.attribute:
                if attr.g is not None and attr.g.node:
                    visit(attr.g)
                for sub in attr.graphs:
                    visit(sub)

    visit(model.graph)
    return found


def differs_from_itself(run: Callable[[], Sequence[np.ndarray]]) -> Optional[bool]:
    """Whether two runs of ``run`` (a reference on one fixed input) disagree: a shape
    or any value (NaN equal to NaN). None when it raises."""
    try:
        first = [np.asarray(a) for a in run()]
        second = [np.asarray(a) for a in run()]
    except Exception:  # noqa: BLE001  (a reference that cannot run names no draw)
        return None
    if len(first) != len(second):
        return True
    for a, b in zip(first, second, strict=True):
        if a.shape != b.shape:
            return True
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            if not np.array_equal(a, b, equal_nan=True):
                return True
        elif not np.array_equal(a, b):
            return True
    return False


def one_session_runs(onnx_path: str, feeds: Dict[str, np.ndarray]
                     ) -> Callable[[], Sequence[np.ndarray]]:
    """Runs of onnxruntime on ``feeds`` that share one session. A seeded random node
    draws the same numbers in every new session and new ones on each run of a
    session, so only runs in one session show whether the graph draws."""
    from tfx_bridge.components.pytorch_model_importer.verify import ort_session, run_ort

    session: list = []

    def run():
        if not session:
            session.append(ort_session(onnx_path))
        return run_ort(onnx_path, feeds, session[0])
    return run


def stochastic_finding(onnx_path: str, describe: Callable[[str, str], str],
                       rerun: Callable[[], Sequence[np.ndarray]], reference: str
                       ) -> Optional[Dict[str, object]]:
    """The report's ``random_draws`` for a model that failed its checks: None unless
    the exported graph draws random numbers and ``reference`` (torch, or onnxruntime
    for an ONNX hand-over), run twice by ``rerun`` on one input, differs from itself.
    ``describe(op, node)``: the node with its module, in the converter's words."""
    from tfx_bridge.components.pytorch_model_importer.source import lazy_onnx

    try:
        model = lazy_onnx().load(onnx_path, load_external_data=False)
    except Exception:  # noqa: BLE001  (an unreadable graph names no draw)
        return None
    nodes = random_nodes(model)
    if not nodes:
        return None
    if not differs_from_itself(rerun):
        return None
    return {"reference": reference, "op": nodes[0][0], "node": nodes[0][1],
            "nodes": [describe(op, name) for op, name in nodes[:8]],
            "count": len(nodes)}


def cause(finding: Dict[str, object]) -> str:
    """The report's likely cause for a model that draws random numbers."""
    more = f" (and {finding['count'] - 8} more)" if finding["count"] > 8 else ""
    return (f"the model draws random numbers in its forward: {'; '.join(finding['nodes'])}"
            f"{more}. {finding['reference']} run twice on the same input differs from "
            "itself, so no conversion can be checked against it: every run is a new "
            "draw. Make the draw deterministic before handing the model over (set its "
            "noise or sampling scale to 0, or pass the noise in as an input), then "
            "import it again")
