"""The ONNX -> TF converter's interpreter (onnx_tf/core.py): the mechanism every op uses.

Graphs are built with onnx.helper, converted, and run against onnxruntime.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")

import tensorflow as tf  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tfx_bridge.onnx_tf import ConversionFailed, core  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _flatten_model():
    """x [batch, 2, 3] -> Reshape(x, Concat(Shape(x)[0:1], [-1])) @ W + b: shape arithmetic
    over a dynamic batch, as torch.flatten exports it."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 2048)).astype(np.float32)  # large: a tracked variable
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["batch"]),
        helper.make_node("Concat", ["batch", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             numpy_helper.from_array(w, "w")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2048])
    return _model(nodes, [x], [y], inits)


def test_convert_dynamic_batch_through_shape_arithmetic_stays_dynamic():
    model = _flatten_model()
    converted = core.convert(model)
    spec = converted.serve.structured_input_signature[0][0]
    assert spec.shape.as_list() == [None, 2, 3]
    for batch in (1, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 2, 3)).astype(np.float32)
        got = converted.serve(tf.constant(x))["y"].numpy()
        np.testing.assert_allclose(got, _ort(model, {"x": x})[0], atol=1e-5)


def test_convert_large_initializer_saved_as_tracked_variable(tmp_path):
    model = _flatten_model()
    converted = core.convert(model)
    assert [tuple(v.shape) for v in converted.module.weights] == [(6, 2048)]
    core.save(converted, str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    x = np.ones((3, 2, 3), np.float32)
    got = loaded.signatures["serving_default"](x=tf.constant(x))["y"].numpy()
    np.testing.assert_allclose(got, _ort(model, {"x": x})[0], atol=1e-5)


def test_convert_unknown_attribute_refused_by_name_before_tracing():
    node = helper.make_node("Relu", ["x"], ["y"], name="act", alpha=0.5)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ConversionFailed,
                       match=r"ONNX op Relu \(node act\): attribute\(s\) \['alpha'\] are not "
                             r"supported"):
        core.convert(model)


def test_convert_unsupported_ops_collected_and_raised_once():
    nodes = [helper.make_node("StringNormalizer", ["s"], ["t"], name="norm"),
             helper.make_node("Relu", ["x"], ["y"], name="act"),
             helper.make_node("MyOp", ["x"], ["z"], name="custom", domain="com.example")]
    inputs = [helper.make_tensor_value_info("s", TensorProto.STRING, [2]),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])]
    outputs = [helper.make_tensor_value_info(n, t, [2]) for n, t in
               (("t", TensorProto.STRING), ("y", TensorProto.FLOAT), ("z", TensorProto.FLOAT))]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("com.example", 1)])
    with pytest.raises(ConversionFailed) as info:
        core.convert(model)
    found = {(p.op_type, p.node) for p in info.value.problems}
    assert found == {("StringNormalizer", "norm"), ("MyOp", "custom")}
    assert "custom domain 'com.example'" in str(info.value)


def test_convert_output_disagreeing_with_onnx_inference_refused_at_the_node():
    # value_info claims Transpose keeps [2, 3]; ONNX semantics (and the handler) give [3, 2].
    node = helper.make_node("Transpose", ["x"], ["t"], name="swap", perm=[1, 0])
    relu = helper.make_node("Relu", ["t"], ["y"], name="act")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node, relu], "g", [x], [y],
                              value_info=[helper.make_tensor_value_info(
                                  "t", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ConversionFailed,
                       match=r"ONNX op Transpose \(node swap\): output 't' has shape "
                             r"\(3, 2\), ONNX infers \[2, 3\]"):
        core.convert(model)


def test_convert_channel_last_output_disagreeing_with_inference_said_in_onnx_order():
    # The convolution's output is held channel-last; the message still reads NCHW.
    w = numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])
    relu = helper.make_node("Relu", ["c"], ["y"], name="act")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([conv, relu], "g", [x], [y], initializer=[w],
                              value_info=[helper.make_tensor_value_info(
                                  "c", TensorProto.FLOAT, [1, 5, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ConversionFailed,
                       match=r"ONNX op Conv \(node conv\): output 'c' has shape "
                             r"\(1, 2, 4, 4\), ONNX infers \[1, 5, 4, 4\]"):
        core.convert(model)


def test_convert_constant_subgraph_folded_to_static_values():
    # Unsqueeze's axes come from Shape/Gather over a static input: folded, so TF gets ints.
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "idx"], ["rank_minus"], axis=0),
             helper.make_node("Sub", ["rank_minus", "one"], ["axis"]),
             helper.make_node("Unsqueeze", ["x", "axis"], ["y"])]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "idx"),
             numpy_helper.from_array(np.array([3], np.int64), "one")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _model(nodes, [x], [y], inits)
    converted = core.convert(model)
    xv = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = converted.serve(tf.constant(xv))["y"].numpy()
    np.testing.assert_array_equal(got, _ort(model, {"x": xv})[0])
    assert got.shape == (2, 1, 4)


def test_convert_string_op_from_onnx_node_tests_raises_conversion_failed_naming_it():
    """A model from the onnx wheel's own node tests whose op (string normalization)
    the converter does not implement: refused by name, every problem listed."""
    import os

    case = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node",
                        "test_strnormalizer_export_monday_casesensintive_lower", "model.onnx")
    model = core.load_for_conversion(case)
    with pytest.raises(ConversionFailed,
                       match=r"^ONNX op StringNormalizer \(node \(unnamed\)\): "
                             r"no converter for this op\.") as caught:
        core.convert(model)
    assert [p.op_type for p in caught.value.problems] == ["StringNormalizer"]
