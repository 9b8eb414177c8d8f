"""Channel-last conversion (onnx_tf/layout.py, fold.py): each op family the converter
carries channel-last, between two convolutions or before the output, against
onnxruntime at odd shapes; only the signature's edges keep a Transpose.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")

import tensorflow as tf  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import channel_last_helpers  # noqa: E402
from channel_last_helpers import C_IN, H, W  # noqa: E402
from channel_last_helpers import transposes as _transposes  # noqa: E402

from tfx_bridge.onnx_tf import core  # noqa: E402
from tfx_bridge.onnx_tf.fold import fold_batch_norms  # noqa: E402

C = 4
RNG = np.random.default_rng(0)


def _const(name, shape, low=-1.0, high=1.0):
    return numpy_helper.from_array(RNG.uniform(low, high, shape).astype(np.float32), name)


def _conv(x, out, w, b=None, cin=C, cout=C, k=3, pads=1, **attrs):
    inits = [_const(w, [cout, cin, k, k])] + ([_const(b, [cout])] if b else [])
    node = helper.make_node("Conv", [x, w] + ([b] if b else []), [out], kernel_shape=[k, k],
                            pads=[pads] * 4, **attrs)
    return node, inits


def _model(middle, middle_inits=(), out_shape=None, tail=True, opset=17, batch="N",
           out_type=TensorProto.FLOAT):
    """x [batch, 3, 5, 7] -> Conv(+bias) -> ``middle`` (reads "a", writes "m") ->
    Conv 1x1 (``tail``) -> y."""
    first, inits = _conv("x", "a", "w1", "b1", cin=C_IN)
    nodes = [first, *middle]
    inits = inits + list(middle_inits)
    if tail:
        last, more = _conv("m", "y", "w2", "b2", k=1, pads=0)
        nodes.append(last)
        inits += more
    else:
        nodes.append(helper.make_node("Identity", ["m"], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, C_IN, H, W])
    y = helper.make_tensor_value_info("y", out_type, out_shape)
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _check(model, edges=2, batches=(1,), fewer=True):
    return channel_last_helpers.check(model, RNG, edges, batches, fewer)


UNARY = [("Relu", {}), ("LeakyRelu", {"alpha": 0.1}), ("Sigmoid", {}), ("HardSwish", {}),
         ("HardSigmoid", {}), ("Elu", {}), ("Tanh", {})]


@pytest.mark.parametrize("op_type,attrs", UNARY, ids=[u[0] for u in UNARY])
def test_channel_last_activation_between_convs_matches_onnxruntime(op_type, attrs):
    _check(_model([helper.make_node(op_type, ["a"], ["m"], **attrs)]))


def test_channel_last_clip_relu6_to_output_matches_onnxruntime():
    bounds = [numpy_helper.from_array(np.array(v, np.float32), n)
              for v, n in ((0.0, "lo"), (6.0, "hi"))]
    _check(_model([helper.make_node("Clip", ["a", "lo", "hi"], ["m"])], bounds, tail=False),
           fewer=False)


@pytest.mark.parametrize("shape", [[C, 1, 1], [1, C, 1, 1], [W]], ids=["c11", "1c11", "w"])
def test_channel_last_add_mul_broadcast_constant_matches_onnxruntime(shape):
    nodes = [helper.make_node("Add", ["a", "k"], ["s"]),
             helper.make_node("Mul", ["s", "k"], ["m"])]
    _check(_model(nodes, [_const("k", shape)]))


def test_channel_last_residual_and_gate_of_two_branches_matches_onnxruntime():
    nodes = [helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Sigmoid", ["a"], ["g"]),
             helper.make_node("Mul", ["r", "g"], ["rg"]),
             helper.make_node("Add", ["rg", "a"], ["m"])]
    _check(_model(nodes), batches=(1, 3))


def test_channel_last_batch_norm_after_relu_matches_onnxruntime():
    stats = [_const("scale", [C]), _const("bias", [C]), _const("mean", [C]),
             _const("var", [C], 0.5, 2.0)]
    nodes = [helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "scale", "bias", "mean", "var"],
                              ["m"], epsilon=1e-3)]
    _check(_model(nodes, stats))


def test_fold_batch_norms_conv_then_bn_one_conv_same_values():
    stats = [_const("scale", [C]), _const("bias", [C]), _const("mean", [C]),
             _const("var", [C], 0.5, 2.0)]
    bn = helper.make_node("BatchNormalization", ["a", "scale", "bias", "mean", "var"], ["m"])
    model = _model([bn], stats, tail=False)
    folded = fold_batch_norms(model)
    assert [n.op_type for n in folded.graph.node] == ["Conv", "Identity"]
    assert [n.op_type for n in model.graph.node] == ["Conv", "BatchNormalization", "Identity"]
    _check(model, fewer=False)


def test_fold_batch_norms_conv_output_used_twice_left_alone():
    stats = [_const("scale", [C]), _const("bias", [C]), _const("mean", [C]),
             _const("var", [C], 0.5, 2.0)]
    nodes = [helper.make_node("BatchNormalization", ["a", "scale", "bias", "mean", "var"],
                              ["n"]),
             helper.make_node("Add", ["n", "a"], ["m"])]
    model = _model(nodes, stats)
    assert fold_batch_norms(model) is model
    _check(model)


@pytest.mark.parametrize("op_type,attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [2, 3]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
], ids=["max_pads", "max_ceil", "avg", "avg_include_pad"])
def test_channel_last_pooling_between_convs_matches_onnxruntime(op_type, attrs):
    _check(_model([helper.make_node(op_type, ["a"], ["m"], **attrs)]))


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool"])
def test_channel_last_global_pool_flatten_gemm_only_input_transpose(pool):
    nodes = [helper.make_node(pool, ["a"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["m"], transB=1)]
    model = _model(nodes, [_const("fw", [6, C]), _const("fb", [6])], tail=False)
    _check(model, edges=1, batches=(1, 2))


def test_channel_last_flatten_of_feature_map_keeps_onnx_order():
    # Flatten of [N, C, H, W] needs the NCHW element order: transposed there.
    nodes = [helper.make_node("Flatten", ["a"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "fw"], ["m"], transB=1)]
    model = _model(nodes, [_const("fw", [6, C * H * W])], tail=False)
    _check(model, edges=2, fewer=False)


def test_channel_last_concat_channels_matches_onnxruntime():
    second, inits = _conv("x", "a2", "w3", cin=C_IN, cout=2)
    nodes = [second, helper.make_node("Concat", ["a", "a2"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["m"])]
    model = _model(nodes, inits, out_shape=[1, C + 2, H, W], tail=False)
    _check(model)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_channel_last_pad_spatial_matches_onnxruntime(mode):
    pads = numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 0], np.int64), "pads")
    _check(_model([helper.make_node("Pad", ["a", "pads"], ["m"], mode=mode)], [pads]))


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_channel_last_resize_matches_onnxruntime(mode):
    scales = numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")
    node = helper.make_node("Resize", ["a", "", "scales"], ["m"], mode=mode)
    _check(_model([node], [scales]))


@pytest.mark.parametrize("keepdims", [1, 0])
def test_channel_last_reduce_mean_spatial_matches_onnxruntime(keepdims):
    node = helper.make_node("ReduceMean", ["a"], ["m"], axes=[2, 3], keepdims=keepdims)
    _check(_model([node], tail=False), edges=1)


def test_channel_last_reduce_mean_axes_input_opset18_matches_onnxruntime():
    axes = numpy_helper.from_array(np.array([-1, 2], np.int64), "axes")
    node = helper.make_node("ReduceMean", ["a", "axes"], ["m"], keepdims=1)
    _check(_model([node], [axes], opset=18), edges=1)  # [N, C, 1, 1] out: a reshape


def test_channel_last_softmax_over_channels_matches_onnxruntime():
    _check(_model([helper.make_node("Softmax", ["a"], ["m"], axis=1)], tail=False),
           fewer=False)


def test_channel_last_value_read_inside_if_branch_sees_onnx_layout():
    then_out = helper.make_tensor_value_info("t", TensorProto.FLOAT, None)
    else_out = helper.make_tensor_value_info("e", TensorProto.FLOAT, None)
    then_g = helper.make_graph([helper.make_node("Relu", ["a"], ["t"])], "then", [],
                               [then_out])
    else_g = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [],
                               [else_out])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["m"], then_branch=then_g, else_branch=else_g)]
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    model = _model(nodes, [zero], out_shape=[1, C, H, W], tail=False)
    converted = core.convert(model)
    options = ort.SessionOptions()  # onnxruntime's own graph rewrites abort on this graph
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    for sign in (1.0, -1.0):
        x = sign * np.abs(RNG.standard_normal((1, C_IN, H, W))).astype(np.float32)
        np.testing.assert_allclose(converted.serve(tf.constant(x))["y"].numpy(),
                                   session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("group,cin_g,attrs", [
    (C, 1, {"strides": [2, 2]}),
    (C, 1, {"dilations": [2, 2]}),
    (C, 1, {"dilations": [2, 2], "strides": [2, 1]}),
    (2, 2, {}),
], ids=["depthwise_strided", "depthwise_dilated", "depthwise_dilated_strided", "grouped"])
def test_channel_last_grouped_conv_between_convs_matches_onnxruntime(group, cin_g, attrs):
    node, inits = _conv("a", "m", "wg", "bg", cin=cin_g, group=group, **attrs)
    _check(_model([node], inits))


def test_channel_last_conv_transpose_between_convs_matches_onnxruntime():
    node = helper.make_node("ConvTranspose", ["a", "wt"], ["m"], strides=[2, 2],
                            pads=[1, 1, 1, 1], output_padding=[1, 1])
    _check(_model([node], [_const("wt", [C, C, 3, 3])]))


def test_channel_last_conv1d_chain_matches_onnxruntime():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[2, 0])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C_IN, W])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[
        _const("w1", [C, C_IN, 3]), _const("w2", [C, C, 3])])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    converted = core.convert(model)
    xv = RNG.standard_normal((2, C_IN, W)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(converted.serve(tf.constant(xv))["y"].numpy(),
                               session.run(None, {"x": xv})[0], rtol=1e-4, atol=1e-4)
    assert _transposes(converted) == 2


def test_channel_last_dilated_strided_conv_explicit_pads_matches_onnxruntime():
    node, inits = _conv("a", "m", "wd", "bd", pads=2, dilations=[2, 2], strides=[1, 2])
    _check(_model([node], inits))


@pytest.mark.parametrize("size,k,attrs,pads,mult,pads_left", [
    ((6, 8), 3, {}, None, 1, 0),
    ((6, 8), 5, {"dilations": [2, 2]}, None, 1, 0),
    ((5, 7), 3, {"strides": [2, 2]}, None, 1, 0),
    ((6, 8), 3, {"strides": [2, 2]}, None, 1, 0),
    ((8, 10), 5, {"strides": [2, 2]}, None, 2, 0),
    ((6, 7), 3, {"strides": [2, 2]}, None, 1, 0),
    ((9, 12), 3, {"strides": [3, 3]}, [1, 1, 1, 1], 1, 0),
    ((6, 8), 2, {}, [1, 1, 0, 0], 1, 0),
    ((6, 8), 2, {}, [0, 1, 1, 0], 1, 0),
    ((6, 8), 3, {"strides": [2, 2]}, [2, 2, 2, 2], 1, 1),
    ((6, 8), 3, {"dilations": [2, 2], "strides": [2, 2]}, None, 1, 0),
    (("H", "W"), 3, {"strides": [2, 2]}, None, 1, 0),
    (("H", "W"), 5, {"strides": [2, 2]}, None, 1, 0),
    (("H", "W"), 2, {"strides": [2, 2]}, [1, 1, 1, 1], 1, 1),
], ids=["stride1", "dilated", "strided_odd", "strided_even", "k5_strided_even_mult2",
        "strided_mixed", "stride3", "pads_before", "pads_mixed", "pads_wider_than_read",
        "dilated_strided", "size_unknown", "k5_size_unknown", "size_unknown_other_output"])
def test_depthwise_conv_pads_as_same_where_reads_equal_no_pad_op(size, k, attrs, pads, mult,
                                                                 pads_left):
    pad = (k - 1) * attrs.get("dilations", [1])[0] // 2
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], group=C,
                            pads=pads or [pad] * 4, **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, *size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", [x], [y],
                              initializer=[_const("w", [C * mult, 1, k, k])])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    converted = core.convert(model)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    shapes = [(6, 8), (7, 9), (1, 2)] if isinstance(size[0], str) else [size]
    for shape in shapes:
        for batch in (1, 2):
            xv = RNG.standard_normal((batch, C, *shape)).astype(np.float32)
            got = converted.serve(tf.constant(xv))["y"].numpy()
            want = session.run(None, {"x": xv})[0]
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    ops = [n.op for n in converted.serve.graph.as_graph_def().node]
    assert ops.count("Pad") + ops.count("PadV2") == pads_left
    assert "DepthwiseConv2dNative" in ops


def test_depthwise_conv_fed_weights_strided_even_matches_onnxruntime():
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], group=C,
                            pads=[1, 1, 1, 1], strides=[2, 2])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, 6, 8])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [C, 1, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph([node], "g", [x, w], [y]),
        opset_imports=[helper.make_opsetid("", 17)]))
    converted = core.convert(model)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    xv = RNG.standard_normal((1, C, 6, 8)).astype(np.float32)
    wv = RNG.standard_normal((C, 1, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(
        converted.serve(x=tf.constant(xv), w=tf.constant(wv))["y"].numpy(),
        session.run(None, {"x": xv, "w": wv})[0], rtol=1e-4, atol=1e-4)
