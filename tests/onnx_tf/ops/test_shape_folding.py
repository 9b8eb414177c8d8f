"""Shape vectors of partly static inputs (onnx_tf/ops/shape_util.py ``known_values``): the
entries known at conversion become constants, so a served graph with a dynamic batch
computes no Shape -> Gather/Slice -> Concat chain per request; values match
onnxruntime at odd batch sizes.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")

import tensorflow as tf  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tfx_bridge.onnx_tf import core  # noqa: E402
from tfx_bridge.onnx_tf.ops.shape_util import known_values  # noqa: E402

SHAPE_CHAIN = {"Shape", "GatherV2", "StridedSlice", "ConcatV2", "Pack"}


def _model(nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _heads_model():
    """x [batch, 5, 6] -> x.view(x.size()[:-1] + (2, 3)) -> transpose -> view(batch, 5,
    6) as transformers' attention exports it: Shape, Gather, Slice, Unsqueeze, Concat."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "minus_one"], ["lead"]),
        helper.make_node("Concat", ["lead", "heads"], ["split_shape"], axis=0),
        helper.make_node("Reshape", ["x", "split_shape"], ["split"]),
        helper.make_node("Transpose", ["split"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Gather", ["s", "zero_scalar"], ["batch"], axis=0),
        helper.make_node("Gather", ["s", "one_scalar"], ["seq"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "zero"], ["batch_1"]),
        helper.make_node("Unsqueeze", ["seq", "zero"], ["seq_1"]),
        helper.make_node("Concat", ["batch_1", "seq_1", "six"], ["merge_shape"], axis=0),
        helper.make_node("Transpose", ["t"], ["back"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["back", "merge_shape"], ["y"]),
    ]
    inits = [_ints("zero", [0]), _ints("minus_one", [-1]), _ints("heads", [2, 3]),
             _ints("six", [6]), _ints("zero_scalar", 0), _ints("one_scalar", 1)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return _model(nodes, [x], [y], inits)


def _two_unknowns_model():
    """x [batch, n, 4] -> Reshape(x, Concat(Shape(x)[0:2], [2, 2])): two entries known
    only per request, so the target stays a run-time tensor."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two"], ["lead"]),
        helper.make_node("Concat", ["lead", "tail"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [_ints("zero", [0]), _ints("two", [2]), _ints("tail", [2, 2])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return _model(nodes, [x], [y], inits)


def _served_ops(converted) -> set:
    """Op types the serving function computes: those its outputs depend on."""
    graph = converted.serve.graph
    seen, stack, types = set(), [t.op for t in converted.serve.outputs], set()
    while stack:
        o = stack.pop()
        if o.name in seen:
            continue
        seen.add(o.name)
        types.add(o.type)
        stack.extend(t.op for t in o.inputs)
        stack.extend(o.control_inputs)
    assert graph is not None
    return types


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_reshape_static_shape_chain_folds_to_constant_target():
    model = _heads_model()
    converted = core.convert(model)
    assert not _served_ops(converted) & SHAPE_CHAIN
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 5, 6)).astype(np.float32)
        got = converted.serve(tf.constant(x))["y"].numpy()
        np.testing.assert_array_equal(got, _ort(model, {"x": x})[0])


def test_reshape_two_runtime_dims_keeps_runtime_target():
    model = _two_unknowns_model()
    converted = core.convert(model)
    assert "Shape" in _served_ops(converted)
    for batch, n in ((1, 3), (2, 5)):
        x = np.random.default_rng(n).standard_normal((batch, n, 4)).astype(np.float32)
        got = converted.serve(tf.constant(x))["y"].numpy()
        np.testing.assert_array_equal(got, _ort(model, {"x": x})[0])


def test_known_values_partial_shape_reads_static_dims():
    @tf.function(input_signature=[tf.TensorSpec([None, 7, 3])])
    def check(x):
        dims = tf.shape(x, out_type=tf.int64)
        assert known_values(dims) == [None, 7, 3]
        assert known_values(tf.concat([dims[:1], [np.int64(-1)]], 0)) == [None, -1]
        assert known_values(tf.gather(dims, [2, 1])) == [3, 7]
        assert known_values(tf.cast(x, tf.int64)) is None  # not a vector
        return x

    check.get_concrete_function()


def _flatten_model(axis: int, dims):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return _model([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], [x], [y], [])


@pytest.mark.parametrize("axis,dims,shapes", [
    (1, ["batch", 3, 2], [(1, 3, 2), (5, 3, 2)]),
    (2, [4, 3, "n"], [(4, 3, 1), (4, 3, 7)]),
    (0, ["batch", 3], [(1, 3), (4, 3)]),
], ids=["batch_front", "unknown_back", "axis_0"])
def test_flatten_one_unknown_side_constant_target(axis, dims, shapes):
    model = _flatten_model(axis, dims)
    converted = core.convert(model)
    assert not _served_ops(converted) & SHAPE_CHAIN
    for shape in shapes:
        x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
        got = converted.serve(tf.constant(x))["y"].numpy()
        np.testing.assert_array_equal(got, _ort(model, {"x": x})[0])


@pytest.mark.parametrize("axis,dims,shapes", [
    (1, ["batch", "n", 2], [(2, 3, 2), (1, 1, 2)]),
    (2, ["batch", 0, 2], [(3, 0, 2)]),
    (1, ["batch", 0, 2], [(3, 0, 2), (1, 0, 2)]),
], ids=["unknown_both_sides", "zero_sized_unknown_side", "zero_sized_known_side"])
def test_flatten_unknown_both_sides_or_empty_runtime_target(axis, dims, shapes):
    model = _flatten_model(axis, dims)
    converted = core.convert(model)
    assert "Shape" in _served_ops(converted)
    for shape in shapes:
        x = np.zeros(shape, np.float32) + np.arange(np.prod(shape), dtype=np.float32).reshape(
            shape)
        got = converted.serve(tf.constant(x))["y"].numpy()
        np.testing.assert_array_equal(got, _ort(model, {"x": x})[0])


@pytest.mark.parametrize("dims,perm,shapes", [
    (["n", 3, 0, 5], [0, 3, 1, 2], [(0, 3, 0, 5), (2, 3, 0, 5)]),
    (["n", 3, 4, 5], [0, 2, 3, 1], [(0, 3, 4, 5), (2, 3, 4, 5)]),
    (["n", 1, 4, 5], [0, 2, 3, 1], [(1, 1, 4, 5), (3, 1, 4, 5)]),
], ids=["zero_sized_axis", "runs_merged", "size_1_axis"])
def test_transpose_dynamic_batch_matches_onnxruntime(dims, perm, shapes):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _model([helper.make_node("Transpose", ["x"], ["y"], perm=perm)], [x], [y], [])
    converted = core.convert(model)
    for shape in shapes:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        got = converted.serve(tf.constant(x))["y"].numpy()
        want = _ort(model, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
