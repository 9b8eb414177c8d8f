"""MatMul of a rank >= 3 input by a 2-D weight (onnx_tf/ops/matmul.py): one 2-D MatMul
on the flattened rows, and a constant bias added after it as that MatMul's BiasAdd, so
the served graph runs what TF's CPU remapper fuses instead of a broadcast
BatchMatMulV2; values match onnxruntime at odd shapes and batch 1. Gemm's constant
weights are stored as [K, N], so its MatMul runs without transpose_b.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")

import tensorflow as tf  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tfx_bridge.onnx_tf import core  # noqa: E402

RNG = np.random.default_rng(3)


def _weight(name, shape):
    return numpy_helper.from_array(RNG.uniform(-1, 1, shape).astype(np.float32), name)


def _model(x_shape, bias_shape=(7,), bias_first=False, dynamic_k=False):
    """x [x_shape] -> MatMul(W [K, 7]) -> Add(bias) -> Relu -> MatMul(W2 [7, 3]) -> y."""
    k = x_shape[-1]
    add_inputs = ["b", "mm"] if bias_first else ["mm", "b"]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
             helper.make_node("Add", add_inputs, ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    inits = [_weight("w", [k, 7]), _weight("b", list(bias_shape)), _weight("w2", [7, 3])]
    x_dims = list(x_shape[:-1]) + ["k" if dynamic_k else k]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _op_types(converted) -> list:
    return [n.op for n in converted.serve.graph.as_graph_def().node]


def _check(model, spec, shapes):
    converted = core.convert(model, {"x": spec})
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for shape in shapes:
        x = RNG.standard_normal(shape).astype(np.float32)
        got = converted.serve(tf.constant(x))["y"].numpy()
        want = session.run(None, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return _op_types(converted)


@pytest.mark.parametrize("bias_shape,bias_first", [((7,), False), ((1, 1, 7), False),
                                                   ((7,), True)])
def test_matmul_rank3_by_weight_then_bias_is_2d_matmul_bias_add(bias_shape, bias_first):
    model = _model(["batch", 5, 6], bias_shape, bias_first)
    ops = _check(model, [None, 5, 6], [(1, 5, 6), (3, 5, 6)])
    assert "BatchMatMulV2" not in ops
    assert ops.count("MatMul") == 2 and ops.count("BiasAdd") == 1
    assert "AddV2" not in ops


def test_matmul_rank4_dynamic_lead_dims_matches_onnxruntime():
    model = _model(["batch", "t", 2, 6])
    ops = _check(model, [None, None, 2, 6], [(1, 1, 2, 6), (2, 9, 2, 6)])
    assert "BatchMatMulV2" not in ops and "BiasAdd" in ops


def test_matmul_bias_over_rows_not_fused_still_matches_onnxruntime():
    # a [5, 7] addend varies over rows: a plain broadcast Add, not a BiasAdd
    model = _model(["batch", 5, 6], (5, 7))
    ops = _check(model, [None, 5, 6], [(1, 5, 6), (4, 5, 6)])
    assert "BiasAdd" not in ops and "AddV2" in ops


def test_matmul_unknown_inner_dim_stays_batched_matches_onnxruntime():
    # K known only per request (it may be 0): the broadcast product, no reshape
    model = _model(["batch", 5, 6], dynamic_k=True)
    ops = _check(model, [None, 5, None], [(2, 5, 6)])
    assert "BatchMatMulV2" in ops


def _einsum_model(equation, x_shape, w_shape):
    nodes = [helper.make_node("Einsum", ["x", "w"], ["y"], equation=equation)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[_weight("w", w_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


@pytest.mark.parametrize("equation,w_shape", [("bsk,kn->bsn", [6, 7]),
                                              ("...k,nk->...n", [7, 6]),
                                              ("bsk,nk->bsn", [7, 6])])
def test_einsum_linear_contraction_is_2d_matmul_matches_onnxruntime(equation, w_shape):
    model = _einsum_model(equation, ["batch", 5, 6], w_shape)
    ops = _check(model, [None, 5, 6], [(1, 5, 6), (3, 5, 6)])
    assert "Einsum" not in ops and "BatchMatMulV2" not in ops and "MatMul" in ops


def test_einsum_rank2_linear_is_matmul_matches_onnxruntime():
    model = _einsum_model("bk,kn->bn", ["batch", 6], [6, 7])
    ops = _check(model, [None, 6], [(1, 6), (4, 6)])
    assert "Einsum" not in ops and "MatMul" in ops


@pytest.mark.parametrize("equation", ["bsk,kn->bns", "bsk,nk"])  # implicit: "bns"
def test_einsum_other_output_order_keeps_einsum_matches_onnxruntime(equation):
    model = _einsum_model(equation, ["batch", 5, 6], [6, 7] if "kn" in equation else [7, 6])
    ops = _check(model, [None, 5, 6], [(2, 5, 6)])
    assert "Einsum" in ops


def test_einsum_scalar_operand_keeps_einsum_matches_onnxruntime():
    nodes = [helper.make_node("Einsum", ["s", "x"], ["y"], equation=",k->k")]
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "g", [s, x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model)
    converted = core.convert(model)
    feeds = {"s": np.array(1.5, np.float32), "x": RNG.standard_normal(6).astype(np.float32)}
    got = converted.serve(**{k: tf.constant(v) for k, v in feeds.items()})["y"].numpy()
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _gemm_model(trans_b: int, weights_as_input: bool, bias: bool, alpha=1.0, beta=1.0):
    """x [batch, 40] -> Gemm(W, transB, bias) -> y [batch, 33]; W large enough to be
    held as a variable, or fed as a second input."""
    shape = [33, 40] if trans_b else [40, 33]
    inputs = ["x", "w"] + (["b"] if bias else [])
    nodes = [helper.make_node("Gemm", inputs, ["y"], transB=trans_b, alpha=alpha, beta=beta)]
    inits = ([] if weights_as_input else [_weight("w", shape)]) + (
        [_weight("b", [33])] if bias else [])
    feeds = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 40])]
    if weights_as_input:
        feeds.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", feeds, [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _matmul_transposes(converted) -> list:
    return [n.attr["transpose_b"].b for n in converted.serve.graph.as_graph_def().node
            if n.op == "MatMul"]


@pytest.mark.parametrize("trans_b,bias,alpha,beta", [(1, True, 1.0, 1.0), (1, False, 1.0, 1.0),
                                                     (1, True, 0.5, 2.0), (0, True, 1.0, 1.0)])
def test_gemm_constant_weights_stored_untransposed_matches_onnxruntime(trans_b, bias, alpha,
                                                                       beta):
    # torch's Linear exports transB=1: the served MatMul reads [K, N] weights as stored
    model = _gemm_model(trans_b, weights_as_input=False, bias=bias, alpha=alpha, beta=beta)
    converted = core.convert(model, {"x": [None, 40]})
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for rows in (1, 5):
        x = RNG.standard_normal((rows, 40)).astype(np.float32)
        got = converted.serve(tf.constant(x))["y"].numpy()
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert _matmul_transposes(converted) == [False]
    # the weights are held once, as the MatMul reads them
    assert [tuple(w.shape) for w in converted.module.weights] == [(40, 33)]


def test_gemm_fed_weights_transposed_in_the_product_matches_onnxruntime():
    model = _gemm_model(1, weights_as_input=True, bias=True)
    converted = core.convert(model, {"x": [None, 40], "w": [33, 40]})
    feeds = {"x": RNG.standard_normal((3, 40)).astype(np.float32),
             "w": RNG.standard_normal((33, 40)).astype(np.float32)}
    got = converted.serve(**{k: tf.constant(v) for k, v in feeds.items()})["y"].numpy()
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert _matmul_transposes(converted) == [True]


def test_gemm_weights_also_gathered_kept_as_one_table_matches_onnxruntime():
    # tied embeddings: the table is gathered and scored against (Gemm, transB=1); a
    # transposed copy would hold the table twice
    nodes = [helper.make_node("Gather", ["w", "ids"], ["emb"]),
             helper.make_node("ReduceMean", ["emb"], ["user"], axes=[1], keepdims=0),
             helper.make_node("Gemm", ["user", "w"], ["y"], transB=1)]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [ids], [y], initializer=[_weight("w", [50, 40])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    converted = core.convert(model, {"ids": [None, 3]})
    feeds = {"ids": RNG.integers(0, 50, (2, 3)).astype(np.int64)}
    got = converted.serve(tf.constant(feeds["ids"]))["y"].numpy()
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert _matmul_transposes(converted) == [True]
    assert [tuple(w.shape) for w in converted.module.weights] == [(50, 40)]
