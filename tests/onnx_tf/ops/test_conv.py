"""Grouped convolutions (onnx_tf/ops/conv.py): groups merged into block-diagonal
convolutions, against onnxruntime at odd shapes and batch 1, in 1-D, 2-D and 3-D."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")

import tensorflow as tf  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tfx_bridge.onnx_tf import core  # noqa: E402
from tfx_bridge.onnx_tf.ops import conv  # noqa: E402

RNG = np.random.default_rng(2)


def _grouped(spatial, group, cin_g, mult, k, fed_weights=False, **attrs):
    cin, cout = group * cin_g, group * mult
    nd = len(spatial)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group,
                            kernel_shape=[k] * nd, **attrs)
    w = RNG.uniform(-1, 1, [cout, cin_g, *[k] * nd]).astype(np.float32)
    b = RNG.uniform(-1, 1, [cout]).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", cin, *spatial])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inputs, inits = [x], [numpy_helper.from_array(b, "b")]
    if fed_weights:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph([node], "g", inputs, [y], initializer=inits),
        opset_imports=[helper.make_opsetid("", 17)]))
    return model, w


def _run_both(model, w, cin, spatial, fed_weights=False):
    converted = core.convert(model)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = RNG.standard_normal((batch, cin, *spatial)).astype(np.float32)
        feeds = {"x": x, "w": w} if fed_weights else {"x": x}
        got = converted.serve(**{k: tf.constant(v) for k, v in feeds.items()})["y"].numpy()
        want = session.run(None, feeds)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    ops = [n.op for n in converted.serve.graph.as_graph_def().node]
    return sum(op in ("Conv2D", "Conv3D", "DepthwiseConv2dNative") for op in ops)


@pytest.mark.parametrize("spatial,group,cin_g,mult,k,attrs,convs", [
    ((7, 9), 6, 2, 3, 3, {"pads": [1, 1, 1, 1]}, 1),
    ((7, 9), 12, 4, 1, 3, {"pads": [0, 1, 2, 1], "strides": [2, 2]}, 2),
    ((9,), 16, 1, 1, 5, {"pads": [2, 2]}, 1),
    ((9,), 16, 1, 2, 3, {"pads": [1, 0], "dilations": [2]}, 1),
    ((9,), 16, 1, 1, 3, {"strides": [2]}, 2),
    ((9,), 10, 4, 2, 3, {"dilations": [2], "strides": [2]}, 2),
    ((3, 4, 5), 4, 2, 2, 3, {"pads": [1] * 6}, 1),
    ((7, 9), 2, 40, 1, 1, {}, 2),
], ids=["2d_one_block", "2d_strided_two_blocks", "1d_depthwise", "1d_depthwise_dilated_mult2",
        "1d_depthwise_strided_two_blocks", "1d_dilated_strided", "3d_one_block",
        "wide_groups_split"])
def test_grouped_conv_block_diagonal_matches_onnxruntime(spatial, group, cin_g, mult, k,
                                                         attrs, convs):
    model, w = _grouped(spatial, group, cin_g, mult, k, **attrs)
    assert _run_both(model, w, group * cin_g, spatial) == convs


def test_grouped_conv_fed_weights_one_conv_per_group_matches_onnxruntime():
    model, w = _grouped((5, 6), 3, 2, 2, 3, fed_weights=True, pads=[1, 1, 1, 1])
    assert _run_both(model, w, 6, (5, 6), fed_weights=True) == 3


def test_block_diagonal_keeps_each_group_on_its_block_zeros_elsewhere():
    group, cin_g, mg = 6, 2, 3
    w = RNG.standard_normal((3, 3, cin_g, group * mg)).astype(np.float32)
    merged = conv.block_diagonal(w, group, 3)
    assert merged.shape == (3, 3, 3 * cin_g, group * mg)
    for g in range(group):
        j = g % 3
        block = merged[..., :, g * mg:(g + 1) * mg]
        np.testing.assert_array_equal(block[..., j * cin_g:(j + 1) * cin_g, :],
                                      w[..., g * mg:(g + 1) * mg])
        assert not np.delete(block, np.s_[j * cin_g:(j + 1) * cin_g], axis=-2).any()


def test_grouped_conv_each_part_biased_and_padded_by_its_own_kernel():
    # Each part's BiasAdd follows its Conv2D (the pattern TF's remapper fuses), and 2-D
    # pads are the kernels' explicit paddings, not a Pad copy of the whole input.
    model, w = _grouped((7, 9), 64, 1, 1, 3, pads=[1, 1, 1, 1], strides=[1, 2])
    converted = core.convert(model)
    nodes = {n.name: n for n in converted.serve.graph.as_graph_def().node}
    convs = [n for n in nodes.values() if n.op == "Conv2D"]
    biased = [n for n in nodes.values() if n.op == "BiasAdd"
              and nodes[n.input[0].split(":")[0]].op == "Conv2D"]
    assert len(convs) == len(biased) == 8
    assert not any(n.op in ("Pad", "PadV2") for n in nodes.values())
    assert _run_both(model, w, 64, (7, 9)) == 8
