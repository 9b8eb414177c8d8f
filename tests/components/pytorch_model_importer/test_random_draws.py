"""A model that samples in its forward: not blessed, and the report names the drawing
node, its op and module, and the fix; with its noise scale at 0 it verifies."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge.components.pytorch_model_importer import (  # noqa: E402
    convert,
    random_draws,
    report,
)
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _import(tmp_path, scale: float):
    from zoo_models import NoisyHead

    path = str(tmp_path / "noisy.pt")
    torch.save(NoisyHead(scale).state_dict(), path)
    config = ImporterConfig(source_kind="state_dict", source_path=path,
                            module_class="zoo_models:NoisyHead",
                            module_kwargs={"noise_scale": scale},
                            inputs=["x:float32:-1,6"], output_names=["y"],
                            converter="tfx-bridge")
    return convert.import_model(config, str(tmp_path / "model"), batch_sizes=(1, 3))


def test_import_model_random_draw_not_blessed_names_node_op_module_and_fix(tmp_path):
    result = _import(tmp_path, 0.5)
    assert not result.blessed
    draws = result.report["random_draws"]
    assert draws["op"] == "RandomNormalLike" and draws["reference"] == "torch"
    assert draws["nodes"][0].endswith("from the model's own forward (NoisyHead))")
    cause = report.likely_cause(result.report)
    assert cause.startswith("the model draws random numbers in its forward: ONNX op "
                            "RandomNormalLike (node ")
    assert "differs from itself" in cause and "set its noise or sampling scale to 0" in cause


def test_import_model_random_draw_scaled_to_zero_blessed(tmp_path):
    result = _import(tmp_path, 0.0)
    assert result.blessed, result.report["checks"]
    assert result.report["random_draws"] is None


def test_random_draws_differs_from_itself_shape_value_nan_and_error():
    draws = iter([[np.zeros(2)], [np.zeros(3)]])
    assert random_draws.differs_from_itself(lambda: next(draws)) is True
    assert random_draws.differs_from_itself(lambda: [np.array([np.nan, 1.0])]) is False
    counter = iter(range(10))
    assert random_draws.differs_from_itself(lambda: [np.array([next(counter)])]) is True

    def fails():
        raise RuntimeError("no")

    assert random_draws.differs_from_itself(fails) is None


def test_random_draws_dropout_training_and_subgraph_nodes_found():
    from onnx import TensorProto, helper

    inner = helper.make_graph(
        [helper.make_node("RandomUniformLike", ["x"], ["u"], name="/branch/RandomUniformLike")],
        "then", [], [helper.make_tensor_value_info("u", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Dropout", ["x", "ratio", "train"], ["d"], name="/drop/Dropout"),
             helper.make_node("Dropout", ["x"], ["e"], name="/eval/Dropout"),
             helper.make_node("If", ["c"], ["u"], name="/If", then_branch=inner,
                              else_branch=inner)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info(
            "d", TensorProto.FLOAT, [2])])
    found = random_draws.random_nodes(helper.make_model(graph))
    branch = ("RandomUniformLike", "/branch/RandomUniformLike")
    assert found == [("Dropout", "/drop/Dropout"), branch, branch]


def test_import_onnx_seeded_random_node_not_blessed_names_node_against_onnxruntime(tmp_path):
    # A seeded node gives the same draw in every new onnxruntime session: the draw
    # shows only between two runs of one session.
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("RandomNormalLike", ["x"], ["noise"], name="/flow/RandomNormalLike",
                            seed=3.0)
    add = helper.make_node("Add", ["x", "noise"], ["y"], name="/flow/Add")
    graph = helper.make_graph(
        [node, add], "noisy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 5])])
    path = str(tmp_path / "noisy.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    config = ImporterConfig(source_kind="onnx", source_path=path, inputs=["x:float32:-1,5"],
                            output_names=["y"], converter="tfx-bridge")
    result = convert.import_model(config, str(tmp_path / "model"), batch_sizes=(1, 3))
    assert not result.blessed
    draws = result.report["random_draws"]
    assert draws["reference"] == "onnxruntime" and draws["op"] == "RandomNormalLike"
    assert draws["node"] == "/flow/RandomNormalLike"
    assert report.likely_cause(result.report).startswith(
        "the model draws random numbers in its forward: ONNX op RandomNormalLike")
