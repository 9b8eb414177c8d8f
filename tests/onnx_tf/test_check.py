"""What the converter refuses before tracing (onnx_tf/check.py): found from the graph
alone, every problem named by op and node."""
from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")

from onnx import TensorProto, helper  # noqa: E402

from tfx_bridge.onnx_tf.check import check_model, iter_nodes  # noqa: E402


def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _x(name="x", elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, [2])


def test_check_model_claimed_graph_no_problems():
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="act")], [_x()], [_x("y")])
    assert check_model(model) == []


def test_check_model_each_kind_of_refusal_named_by_node():
    nodes = [helper.make_node("NoSuchOp", ["x"], ["a"], name="unknown"),
             helper.make_node("Relu", ["x"], ["b"], name="extra_attr", alpha=0.5),
             helper.make_node("Abs", ["x"], ["c"], name="custom", domain="com.example"),
             helper.make_node("Relu", ["h"], ["d"], name="narrow")]
    model = _model(nodes, [_x(), _x("h", TensorProto.BFLOAT16)],
                   [_x(n) for n in "abc"] + [_x("d", TensorProto.BFLOAT16)])
    found = {p.node: p.variant for p in check_model(model)}
    assert found["unknown"] == "no converter for this op"
    assert "['alpha']" in found["extra_attr"]
    assert "custom domain 'com.example'" in found["custom"]
    assert "BFLOAT16" in found["narrow"]


def test_check_model_cast_takes_narrow_types():
    nodes = [helper.make_node("Cast", ["h"], ["y"], name="widen", to=TensorProto.FLOAT)]
    model = _model(nodes, [_x("h", TensorProto.BFLOAT16)], [_x("y")])
    assert check_model(model) == []


def test_iter_nodes_enters_subgraphs():
    body = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="inner")], "b", [],
                             [_x("r")])
    node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=body,
                            else_branch=body)
    model = _model([node], [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                   [_x("y")])
    assert [n.name for n in iter_nodes(model.graph)] == ["branch", "inner", "inner"]
