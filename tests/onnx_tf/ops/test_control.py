"""The converter's control-flow ops (If, Loop, Scan) on tiny ONNX graphs, checked against
onnxruntime; random ops by shape and dtype; the refusals by name."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import tensorflow as tf  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from tfx_bridge.onnx_tf import ConversionFailed, core  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _run_both(model, feeds, dynamic=None):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    converted = core.convert(model, dynamic)
    out = converted.serve(*[tf.constant(v) for v in feeds.values()])
    got = [out[n].numpy() for n in converted.output_names]
    return want, got


def _assert_same(want, got):
    assert len(want) == len(got)
    for w, g in zip(want, got, strict=True):
        assert w.dtype == g.dtype and w.shape == g.shape, (w.shape, g.shape)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def _sum_loop_model(with_cond: bool):
    """Loop: s += x[i] for i < M (while s < limit when with_cond), scanning each s."""
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["i", "axes"], ["i1"]),
         helper.make_node("Add", ["i1", "one"], ["i2"]),
         helper.make_node("Slice", ["x", "i1", "i2"], ["xi"]),
         helper.make_node("Add", ["s_in", "xi"], ["s_out"]),
         helper.make_node("ReduceSum", ["s_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["c_out"]) if with_cond else
         helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Identity", ["s_out"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c_in", B, []),
         helper.make_tensor_value_info("s_in", F, [1])],
        [helper.make_tensor_value_info("c_out", B, []),
         helper.make_tensor_value_info("s_out", F, [1]),
         helper.make_tensor_value_info("scan", F, [1])],
        [helper.make_tensor("axes", I64, [1], [0]), helper.make_tensor("one", I64, [1], [1])])
    loop = helper.make_node("Loop", ["M", "cond", "s0"], ["s", "history"], body=body)
    return _model(
        [loop],
        [helper.make_tensor_value_info("M", I64, []),
         helper.make_tensor_value_info("cond", B, []),
         helper.make_tensor_value_info("s0", F, [1]),
         helper.make_tensor_value_info("x", F, [None]),
         helper.make_tensor_value_info("limit", F, [])],
        [helper.make_tensor_value_info("s", F, [1]),
         helper.make_tensor_value_info("history", F, [None, 1])])


def _loop_feeds(m, limit=100.0):
    return {"M": np.array(m, np.int64), "cond": np.array(True),
            "s0": np.array([0.5], np.float32),
            "x": np.arange(1, 9, dtype=np.float32), "limit": np.array(limit, np.float32)}


def test_loop_runtime_trip_count_sum_and_scan_match_onnxruntime():
    want, got = _run_both(_sum_loop_model(False), _loop_feeds(5))
    _assert_same(want, got)
    assert got[1].shape == (5, 1)


def test_loop_runtime_condition_stops_early_matches_onnxruntime():
    want, got = _run_both(_sum_loop_model(True), _loop_feeds(8, limit=7.0))
    _assert_same(want, got)
    assert got[1].shape[0] < 8


def test_loop_constant_trip_count_unrolled_matches_onnxruntime():
    model = _sum_loop_model(False)
    graph = model.graph
    feeds = _loop_feeds(3)
    # M and cond as initializers: the loop unrolls at conversion time.
    graph.initializer.extend([helper.make_tensor("M", I64, [], [3]),
                              helper.make_tensor("cond", B, [], [True])])
    keep = [i for i in graph.input if i.name not in ("M", "cond")]
    del graph.input[:]
    graph.input.extend(keep)
    del feeds["M"], feeds["cond"]
    want, got = _run_both(model, feeds)
    _assert_same(want, got)


def _if_model():
    """If x.sum() > 0: x * 2 (then) else x - 1, on a run-time condition."""
    then_b = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [None, 3])],
                               [helper.make_tensor("two", F, [], [2.0])])
    else_b = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [None, 3])],
                               [helper.make_tensor("one", F, [], [1.0])])
    return _model(
        [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
         helper.make_node("Greater", ["total", "zero"], ["c"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
        [helper.make_tensor_value_info("x", F, [None, 3]),
         helper.make_tensor_value_info("zero", F, [])],
        [helper.make_tensor_value_info("y", F, [None, 3])])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_runtime_condition_both_branches_match_onnxruntime(sign):
    x = sign * np.arange(6, dtype=np.float32).reshape(2, 3)
    want, got = _run_both(_if_model(), {"x": x, "zero": np.array(0.0, np.float32)})
    _assert_same(want, got)


def test_if_condition_fixed_by_static_shapes_takes_buildable_branch():
    """torch's squeeze(dim) of a size it did not know: If(Shape(x)[1] == 1, Squeeze, x).

    x's dimension 1 is 8 once converted, so the Squeeze branch cannot be built
    (onnxruntime refuses to load the graph at all): the condition is read from
    the static shape and only the Identity branch is converted.
    """
    then_b = helper.make_graph([helper.make_node("Squeeze", ["x", "axis"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, None)],
                               [helper.make_tensor("axis", I64, [1], [1])])
    else_b = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, None)])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Shape", ["x"], ["shape"]),
         helper.make_node("Gather", ["shape", "index"], ["size"], axis=0),
         helper.make_node("Equal", ["size", "one"], ["c"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)], "g",
        [helper.make_tensor_value_info("x", F, [None, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        [helper.make_tensor("index", I64, [1], [1]), helper.make_tensor("one", I64, [1], [1])]),
        opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    converted = core.convert(model)
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    np.testing.assert_array_equal(converted.serve(tf.constant(x))[converted.output_names[0]], x)


def test_if_branch_dtypes_differ_refused_by_name():
    then_b = helper.make_graph([helper.make_node("Constant", [], ["t"], value=helper.make_tensor(
        "v", F, [1], [1.0]))], "then", [], [helper.make_tensor_value_info("t", F, [1])])
    else_b = helper.make_graph([helper.make_node("Constant", [], ["e"], value=helper.make_tensor(
        "v", I64, [1], [1]))], "else", [], [helper.make_tensor_value_info("e", I64, [1])])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)], "g",
        [helper.make_tensor_value_info("c", B, [])], [helper.make_tensor_value_info("y", F, [1])]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ConversionFailed, match="then_branch and int64 in else_branch"):
        core.convert(model)


def _scan_model(reverse: int, out_axis: int):
    """Scan over axis 1 of x [2, L, 3]: running sum of rows, scan output on ``out_axis``."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["seen"])],
        "body",
        [helper.make_tensor_value_info("s_in", F, [2, 3]),
         helper.make_tensor_value_info("row", F, [2, 3])],
        [helper.make_tensor_value_info("s_out", F, [2, 3]),
         helper.make_tensor_value_info("seen", F, [2, 3])])
    scan = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[1], scan_input_directions=[reverse],
                            scan_output_axes=[out_axis], scan_output_directions=[reverse])
    return _model([scan], [helper.make_tensor_value_info("s0", F, [2, 3]),
                           helper.make_tensor_value_info("x", F, [2, None, 3])],
                  [helper.make_tensor_value_info("s", F, [2, 3]),
                   helper.make_tensor_value_info("ys", F, None)])


@pytest.mark.parametrize("reverse,out_axis", [(0, 0), (1, -1)])
@pytest.mark.parametrize("length", [4, 40])  # unrolled, tf.while_loop
def test_scan_axes_and_directions_match_onnxruntime(reverse, out_axis, length):
    x = np.random.default_rng(0).standard_normal((2, length, 3)).astype(np.float32)
    feeds = {"s0": np.ones((2, 3), np.float32), "x": x}
    want, got = _run_both(_scan_model(reverse, out_axis), feeds,
                          dynamic={"x": [2, length, 3]} if length <= 16 else None)
    _assert_same(want, got)


@pytest.mark.parametrize("op_type,attrs,input_shape,dtype", [
    ("RandomNormal", {"shape": [2, 5], "dtype": TensorProto.DOUBLE}, None, np.float64),
    ("RandomUniform", {"shape": [3], "low": 2.0, "high": 3.0}, None, np.float32),
    ("RandomUniformLike", {}, [4, 2], np.float32),
    ("Bernoulli", {"seed": 1.0}, [6], np.float32),
    ("Multinomial", {"sample_size": 7, "dtype": TensorProto.INT64}, [2, 3], np.int64),
])
def test_random_op_shape_dtype_as_onnx(op_type, attrs, input_shape, dtype):
    inputs = [helper.make_tensor_value_info("x", F, input_shape)] if input_shape else []
    model = _model([helper.make_node(op_type, ["x"] if input_shape else [], ["y"], **attrs)],
                   inputs, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    converted = core.convert(model)
    feeds = [tf.constant(np.full(input_shape, 0.5, np.float32))] if input_shape else []
    got = converted.serve(*feeds)["y"].numpy()
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": feeds[0].numpy()} if feeds else {})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    if op_type == "RandomUniform":
        assert np.all((got >= 2.0) & (got < 3.0))


def test_sequence_op_unregistered_refused_by_name():
    model = _model([helper.make_node("SequenceConstruct", ["x"], ["s"]),
                    helper.make_node("SequenceAt", ["s", "zero"], ["y"])],
                   [helper.make_tensor_value_info("x", F, [2]),
                    helper.make_tensor_value_info("zero", I64, [])],
                   [helper.make_tensor_value_info("y", F, [2])])
    with pytest.raises(ConversionFailed, match="SequenceConstruct.*no converter"):
        core.convert(model)
