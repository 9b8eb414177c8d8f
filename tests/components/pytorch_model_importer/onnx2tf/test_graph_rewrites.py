"""onnx2tf's graph rewrites (onnx2tf/graph_rewrites.py): a graph onnxruntime cannot run at another
batch size is refused by name, not a crash."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import signature  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.errors import ConversionError  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.onnx2tf import graph_rewrites  # noqa: E402


def test_fix_dynamic_reshapes_graph_frozen_at_one_batch_refused_naming_node(tmp_path):
    """A constant of the export batch's size (2) added to the input: runs at batch 2,
    not at 3, as a traced graph that froze a shape."""
    frozen = numpy_helper.from_array(np.ones((2, 4), np.float32), "frozen")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "frozen"], ["y"], name="add_frozen"),
         helper.make_node("Flatten", ["y"], ["out"], name="flat")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4])], [frozen])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    specs = signature.parse_input_specs(["x:float32:-1,4"])
    with pytest.raises(ConversionError, match=r"onnxruntime cannot run the exported ONNX graph "
                                              r"\(batch 3\) at node add_frozen: .*froze a size"):
        graph_rewrites.fix_dynamic_reshapes(path, specs)
