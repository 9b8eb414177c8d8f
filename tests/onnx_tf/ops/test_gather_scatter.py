"""GatherElements / ScatterElements whose indices are an Expand broadcast along the
trailing axes (torch's ``index.view(-1, 1, 1).expand_as(src)``, as torchvision's
MultiScaleRoIAlign merges its levels): one coordinate per slice, values equal to
onnxruntime's; partial slices keep the per-element form."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")

import tensorflow as tf  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tfx_bridge.onnx_tf import core  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _index_depths(converted, op_type):
    """The last dimension of the indices of every ``op_type`` the serving function runs."""
    return [o.inputs[1].shape[-1] for o in converted.serve.graph.get_operations()
            if o.type == op_type]


def _merge_model(reduction, target):
    """res = data.scatter(0, idx.view(-1, 1, 1, 1).expand_as(upd), upd, reduce=...); the
    Expand's target is Shape(upd), or a run-time input: then only the updates give the
    indices' static shape."""
    shape = helper.make_node("Shape", ["upd"], ["upd_shape"])
    nodes = [
        helper.make_node("Reshape", ["idx", "col"], ["idx4"]),
        helper.make_node("Expand", ["idx4", "upd_shape"], ["index"]),
        helper.make_node("ScatterElements", ["data", "index", "upd"], ["y"], axis=0,
                         reduction=reduction),
    ]
    inputs = [helper.make_tensor_value_info("data", F, ["n", 3, 2, 5]),
              helper.make_tensor_value_info("idx", I64, ["r"]),
              helper.make_tensor_value_info("upd", F, ["r", 3, 2, 5])]
    if target == "input":
        inputs.append(helper.make_tensor_value_info("upd_shape", I64, [4]))
    else:
        nodes.insert(0, shape)
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", F, None)],
                  [_ints("col", [-1, 1, 1, 1])])


@pytest.mark.parametrize("reduction,target", [
    ("none", "shape"), ("add", "shape"), ("max", "shape"), ("mul", "shape"),
    ("none", "input")])
@pytest.mark.parametrize("rows,picked", [(7, 4), (1, 1), (6, 0)])
def test_scatter_elements_expanded_rows_scatter_whole_slices_matches_onnxruntime(
        reduction, target, rows, picked):
    rng = np.random.default_rng(rows * 10 + picked)
    model = _merge_model(reduction, target)
    converted = core.convert(model)
    # ONNX leaves the order of repeated indices open: distinct rows, some negative.
    idx = rng.permutation(rows)[:picked].astype(np.int64)
    idx[::2] -= rows
    feeds = {"data": rng.standard_normal((rows, 3, 2, 5)).astype(np.float32), "idx": idx,
             "upd": rng.standard_normal((picked, 3, 2, 5)).astype(np.float32)}
    if target == "input":
        feeds["upd_shape"] = np.array([picked, 3, 2, 5], np.int64)
    got = converted.serve(*[tf.constant(v) for v in feeds.values()])["y"].numpy()
    np.testing.assert_allclose(got, _ort(model, feeds), rtol=1e-6, atol=1e-6)
    scatter = {"none": "TensorScatterUpdate", "add": "TensorScatterAdd",
               "max": "TensorScatterMax", "mul": "UnsortedSegmentProd"}[reduction]
    if reduction != "mul":
        assert _index_depths(converted, scatter) == [1]


def _batched_gather_model():
    """out = x.gather(1, idx.unsqueeze(-1).expand(-1, -1, x.size(2))): per-row picks."""
    nodes = [
        helper.make_node("Unsqueeze", ["idx", "last"], ["idx3"]),
        helper.make_node("Shape", ["idx"], ["idx_shape"]),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Slice", ["x_shape", "two", "three"], ["depth"]),
        helper.make_node("Concat", ["idx_shape", "depth"], ["target"], axis=0),
        helper.make_node("Expand", ["idx3", "target"], ["index"]),
        helper.make_node("GatherElements", ["x", "index"], ["y"], axis=1),
    ]
    return _model(nodes,
                  [helper.make_tensor_value_info("x", F, ["b", "t", 6]),
                   helper.make_tensor_value_info("idx", I64, ["b", "k"])],
                  [helper.make_tensor_value_info("y", F, None)],
                  [_ints("last", [2]), _ints("two", [2]), _ints("three", [3])])


@pytest.mark.parametrize("batch,steps,picks", [(3, 9, 4), (1, 1, 1), (2, 5, 7)])
def test_gather_elements_expanded_per_row_picks_gather_slices_matches_onnxruntime(
        batch, steps, picks):
    rng = np.random.default_rng(batch + steps + picks)
    model = _batched_gather_model()
    converted = core.convert(model)
    feeds = {"x": rng.standard_normal((batch, steps, 6)).astype(np.float32),
             "idx": rng.integers(-steps, steps, (batch, picks)).astype(np.int64)}
    got = converted.serve(*[tf.constant(v) for v in feeds.values()])["y"].numpy()
    np.testing.assert_array_equal(got, _ort(model, feeds))
    assert _index_depths(converted, "GatherNd") == [2]


def test_gather_elements_expanded_partial_slices_keeps_element_form():
    """Indices narrower than the data after the axis address part of each slice."""
    nodes = [helper.make_node("Expand", ["idx", "target"], ["index"]),
             helper.make_node("GatherElements", ["x", "index"], ["y"], axis=0)]
    model = _model(nodes,
                   [helper.make_tensor_value_info("x", F, [4, 6]),
                    helper.make_tensor_value_info("idx", I64, [3, 1])],
                   [helper.make_tensor_value_info("y", F, None)],
                   [_ints("target", [3, 5])])
    converted = core.convert(model)
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(4, 6),
             "idx": np.array([[2], [-1], [0]], np.int64)}
    got = converted.serve(*[tf.constant(v) for v in feeds.values()])["y"].numpy()
    np.testing.assert_array_equal(got, _ort(model, feeds))
    assert _index_depths(converted, "GatherNd") == [2]


def test_scatter_elements_expanded_data_width_unknown_keeps_element_form():
    """Whole slices need the data's extent after the axis at conversion."""
    nodes = [helper.make_node("Unsqueeze", ["idx", "last"], ["idx2"]),
             helper.make_node("Shape", ["upd"], ["target"]),
             helper.make_node("Expand", ["idx2", "target"], ["index"]),
             helper.make_node("ScatterElements", ["data", "index", "upd"], ["y"], axis=0)]
    model = _model(nodes,
                   [helper.make_tensor_value_info("data", F, ["n", "m"]),
                    helper.make_tensor_value_info("idx", I64, ["r"]),
                    helper.make_tensor_value_info("upd", F, ["r", "m"])],
                   [helper.make_tensor_value_info("y", F, None)], [_ints("last", [1])])
    converted = core.convert(model)
    feeds = {"data": np.zeros((5, 3), np.float32), "idx": np.array([4, 0], np.int64),
             "upd": np.arange(6, dtype=np.float32).reshape(2, 3)}
    got = converted.serve(*[tf.constant(v) for v in feeds.values()])["y"].numpy()
    np.testing.assert_array_equal(got, _ort(model, feeds))
    assert _index_depths(converted, "TensorScatterUpdate") == [2]


@pytest.mark.parametrize("trips", [1, 5])
def test_gather_elements_in_loop_body_reads_outer_expand_source_not_shadowing_input(trips):
    """A Loop body's input named like the outer Expand's source does not stand in for it."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Identity", ["src"], ["src_out"]),
         helper.make_node("GatherElements", ["data", "index"], ["picked"], axis=0)],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("src", I64, [2, 1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("src_out", I64, [2, 1]),
         helper.make_tensor_value_info("picked", F, [2, 3])])
    nodes = [helper.make_node("Expand", ["src", "target"], ["index"]),
             helper.make_node("Loop", ["trips", "", "other"], ["last", "y"], body=body)]
    model = _model(nodes,
                   [helper.make_tensor_value_info("data", F, [4, 3]),
                    helper.make_tensor_value_info("src", I64, [2, 1]),
                    helper.make_tensor_value_info("other", I64, [2, 1])],
                   [helper.make_tensor_value_info("y", F, None)],
                   [_ints("target", [2, 3]), _ints("trips", trips)], opset=17)
    converted = core.convert(model)
    feeds = {"data": np.arange(12, dtype=np.float32).reshape(4, 3),
             "src": np.array([[3], [1]], np.int64), "other": np.zeros((2, 1), np.int64)}
    got = converted.serve(*[tf.constant(v) for v in feeds.values()])["y"].numpy()
    np.testing.assert_array_equal(got, _ort(model, feeds))
