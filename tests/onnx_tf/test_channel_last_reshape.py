"""Channel-last values through Transpose, Reshape, Slice and Split (onnx_tf/layout.py):
against onnxruntime at odd shapes and batch 1, with the transposes left counted.
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

from tfx_bridge.onnx_tf import layout  # noqa: E402

RNG = np.random.default_rng(1)


def _const(name, shape):
    return numpy_helper.from_array(RNG.uniform(-1, 1, shape).astype(np.float32), name)


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(middle, inits, c=6, tail=True, opset=17, out_shape=None, tail_c=None):
    """x [N, 3, 5, 7] -> Conv 3x3 to ``c`` channels ("a") -> ``middle`` (writes "m") ->
    Conv 1x1 from ``tail_c`` (else ``c``) to 4 channels (``tail``, else "m" is the
    output) -> y."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]), *middle]
    inits = [_const("w1", [c, C_IN, 3, 3]), _const("b1", [c]), *inits]
    if tail:
        nodes.append(helper.make_node("Conv", ["m", "w2"], ["y"], kernel_shape=[1, 1]))
        inits.append(_const("w2", [4, tail_c or c, 1, 1]))
    else:
        nodes.append(helper.make_node("Identity", ["m"], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C_IN, H, W])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _check(model, transposes, batches=(1, 3)):
    """Matches onnxruntime at ``batches``; ``transposes`` remain in the served graph."""
    return channel_last_helpers.check(model, RNG, transposes, batches, fewer=False)


def _shuffle(src, dst, groups, c, batch_from_shape=False):
    """torchvision's channel_shuffle: view [N, g, C/g, H, W], transpose 1<->2, view back."""
    if batch_from_shape:  # x.size(0) read at run time, as a traced export writes it
        lead = [helper.make_node("Shape", [src], ["shp"]),
                helper.make_node("Gather", ["shp", "scalar_zero"], ["n"], axis=0),
                helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
                helper.make_node("Concat", ["n1", "rest5"], ["s5"], axis=0),
                helper.make_node("Concat", ["n1", "rest4"], ["s4"], axis=0)]
        inits = [_ints("zero", [0]), _ints("scalar_zero", 0),
                 _ints("rest5", [groups, c // groups, H, W]), _ints("rest4", [c, H, W])]
    else:
        lead = []
        inits = [_ints("s5", [0, groups, c // groups, H, W]), _ints("s4", [-1, c, H, W])]
    nodes = lead + [helper.make_node("Reshape", [src, "s5"], ["r5"]),
                    helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
                    helper.make_node("Reshape", ["t5", "s4"], [dst])]
    return nodes, inits


@pytest.mark.parametrize("groups,batch_from_shape", [(2, False), (3, False), (2, True)],
                         ids=["g2", "g3", "g2_runtime_batch"])
def test_channel_last_channel_shuffle_then_split_one_transpose_matches_onnxruntime(
        groups, batch_from_shape):
    nodes, inits = _shuffle("a", "sh", groups, 6, batch_from_shape)
    nodes += [helper.make_node("Split", ["sh", "sizes"], ["p1", "p2"], axis=1),
              helper.make_node("Relu", ["p2"], ["p2r"]),
              helper.make_node("Concat", ["p1", "p2r"], ["m"], axis=1)]
    inits.append(_ints("sizes", [2, 4]))
    # The input's and the output's, and the shuffle's own move of channels.
    _check(_model(nodes, inits), transposes=3)


def test_channel_last_transpose_to_channels_last_then_layer_norm_matches_onnxruntime():
    # ConvNeXt's permute to [N, H, W, C], a norm over C, and back: no transpose left
    # inside, the held tensor already is [N, H, W, C].
    nodes = [helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=-1),
             helper.make_node("Transpose", ["n"], ["m"], perm=[0, 3, 1, 2])]
    _check(_model(nodes, [_const("g", [6]), _const("b", [6])]), transposes=2)


def test_channel_last_flatten_spatial_then_transpose_tokens_only_input_transpose():
    # ViT's patch embedding: [N, C, H, W] -> [N, C, H*W] -> [N, H*W, C], then a MatMul.
    nodes = [helper.make_node("Reshape", ["a", "s"], ["f"]),
             helper.make_node("Transpose", ["f"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "wm"], ["m"])]
    model = _model(nodes, [_ints("s", [0, 6, H * W]), _const("wm", [6, 4])], tail=False)
    _check(model, transposes=1)


def test_channel_last_transpose_other_than_layout_matches_onnxruntime():
    # A transpose of spatial axes only: relabelled, then moved once (held to held) for
    # the convolution after it.
    nodes = [helper.make_node("Transpose", ["a"], ["m"], perm=[0, 1, 3, 2])]
    _check(_model(nodes, []), transposes=3, batches=(2,))


@pytest.mark.parametrize("opset,steps", [(17, None), (17, [2]), (9, None)],
                         ids=["axes_input", "stepped", "opset9_attrs"])
def test_channel_last_slice_of_channels_between_convs_matches_onnxruntime(opset, steps):
    if opset < 10:
        nodes = [helper.make_node("Slice", ["a"], ["m"], starts=[1], ends=[5], axes=[1])]
        inits = []
    else:
        names = ["a", "st", "en", "ax"] + (["sp"] if steps else [])
        nodes = [helper.make_node("Slice", names, ["m"])]
        inits = [_ints("st", [1]), _ints("en", [5]), _ints("ax", [-3])]
        if steps:
            inits.append(_ints("sp", steps))
    model = _model(nodes, inits, opset=opset, tail_c=2 if steps else 4)
    _check(model, transposes=2)


def test_channel_last_slice_without_axes_matches_onnxruntime():
    # No axes input: the leading axes, here batch and channels.
    nodes = [helper.make_node("Slice", ["a", "st", "en"], ["m"])]
    model = _model(nodes, [_ints("st", [0, 2]), _ints("en", [100, 6])], tail=False)
    _check(model, transposes=2)


def test_channel_last_reshape_merging_channels_with_spatial_keeps_onnx_order():
    # [N, C, H, W] -> [N, C*H, W]: C and H are not adjacent as held, so ONNX's order is
    # built (one transpose) and reshaped, as before.
    nodes = [helper.make_node("Reshape", ["a", "s"], ["m"])]
    model = _model(nodes, [_ints("s", [0, 6 * H, W])], tail=False)
    _check(model, transposes=2)


def test_merged_transpose_equals_transpose_on_every_permutation_of_rank_5():
    import itertools

    x = RNG.standard_normal((2, 3, 1, 4, 5)).astype(np.float32)
    for perm in itertools.permutations(range(5)):
        np.testing.assert_array_equal(layout.merged_transpose(tf.constant(x), perm).numpy(),
                                      np.transpose(x, perm))


def test_merged_transpose_shuffle_runs_on_three_axes():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 5, 7, 2, 3])
        layout.merged_transpose(x, [0, 1, 2, 4, 3])
    transposes = [op for op in graph.get_operations() if op.type == "Transpose"]
    assert len(transposes) == 1
    assert transposes[0].inputs[0].shape.rank == 3
