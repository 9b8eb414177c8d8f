"""ONNX normalization ops (batch, instance, layer, group, Lp, LRN,
mean-variance) in ONNX semantics, stash types included."""
from __future__ import annotations

from typing import List

from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.spatial import (
    float_input,
)
from tfx_bridge.onnx_tf.registry import REQUIRED, op


def _channel_shape(rank: int, axis: int = 1) -> List[int]:
    shape = [1] * rank
    shape[axis] = -1
    return shape


@op("BatchNormalization", attrs={"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0,
                                 "spatial": 1, "is_test": 0, "consumed_inputs": None},
    check=lambda info: ("training_mode=1 is not supported (inference only)"
                        if info.attrs.get("training_mode") else
                        "spatial=0 is not supported" if info.attrs.get("spatial") == 0 else None))
def batch_normalization(node):
    tf = _tf()
    dtype = float_input(node)
    outputs = [o for o in node.proto.output[1:] if o]
    if outputs:
        node.refuse("the training outputs (running mean/var, saved mean/var) are not "
                    "supported", "export the model in eval mode")
    x, perm = node.physical(0)  # per channel: any axis order, the channel axis found
    rank = node.rank(0)
    axis = 1 if perm is None else perm.index(1)
    shape = _channel_shape(rank, axis) if rank > 1 else [-1]
    scale, bias, mean, var = (tf.reshape(tf.cast(node.t(i), dtype), shape) for i in (1, 2, 3, 4))
    inv = scale / tf.sqrt(var + tf.cast(node.attr("epsilon"), dtype))
    y = (x - mean) * inv + bias
    return y if perm is None else node.emit(y, perm)


@op("InstanceNormalization", attrs={"epsilon": 1e-5})
def instance_normalization(node):
    tf = _tf()
    dtype = float_input(node)
    x = node.t(0)
    rank = node.rank(0)
    axes = list(range(2, rank))
    mean, var = tf.nn.moments(x, axes, keepdims=True)
    shape = _channel_shape(rank)
    scale = tf.reshape(tf.cast(node.t(1), dtype), shape)
    bias = tf.reshape(tf.cast(node.t(2), dtype), shape)
    return (x - mean) / tf.sqrt(var + tf.cast(node.attr("epsilon"), dtype)) * scale + bias


def _stash(node, dtype):
    stash = node.attr("stash_type", 1)
    if stash == 1:
        return _tf().float32
    if stash == 11:
        return _tf().float64
    if stash == 10:
        return _tf().float16
    node.refuse(f"stash_type={stash} is not supported", "use 1 (float32)")
    return dtype


@op("LayerNormalization", attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1})
def layer_normalization(node):
    tf = _tf()
    dtype = float_input(node)
    x = node.t(0)
    rank = node.rank(0)
    axis = node.attr("axis")
    axis = axis + rank if axis < 0 else axis
    compute = _stash(node, dtype)
    xc = tf.cast(x, compute)
    axes = list(range(axis, rank))
    mean = tf.reduce_mean(xc, axes, keepdims=True)
    d = xc - mean
    var = tf.reduce_mean(d * d, axes, keepdims=True)
    inv = tf.math.rsqrt(var + tf.cast(node.attr("epsilon"), compute))
    y = d * inv
    y = tf.cast(y, dtype) * tf.cast(node.t(1), dtype)
    if node.has(2):
        y = y + tf.cast(node.t(2), dtype)
    return [y, mean, inv]


@op("GroupNormalization", attrs={"epsilon": 1e-5, "num_groups": REQUIRED, "stash_type": 1},
    since=18)
def group_normalization(node):
    tf = _tf()
    dtype = float_input(node)
    x = node.t(0)
    rank = node.rank(0)
    groups = int(node.attr("num_groups"))
    channels = node.shape(0)[1]
    if channels is None:
        node.refuse("GroupNormalization needs a static channel dimension")
    if channels % groups:
        node.refuse(f"{channels} channels are not divisible by num_groups={groups}")
    compute = _stash(node, dtype) if node.opset >= 21 else dtype
    shape = tf.shape(x)
    grouped = tf.reshape(tf.cast(x, compute), tf.concat([shape[:1], [groups, -1]], 0))
    mean, var = tf.nn.moments(grouped, [2], keepdims=True)
    y = (grouped - mean) * tf.math.rsqrt(var + tf.cast(node.attr("epsilon"), compute))
    y = tf.cast(tf.reshape(y, shape), dtype)
    scale = tf.cast(node.t(1), dtype)
    bias = tf.cast(node.t(2), dtype)
    if node.opset < 21:  # opset 18: scale and bias are per group
        scale = tf.repeat(scale, channels // groups)
        bias = tf.repeat(bias, channels // groups)
    cshape = _channel_shape(rank)
    return y * tf.reshape(scale, cshape) + tf.reshape(bias, cshape)


@op("LpNormalization", attrs={"axis": -1, "p": 2},
    check=lambda info: None if info.attrs.get("p") in (1, 2)
    else f"p={info.attrs.get('p')} is not supported (ONNX allows 1 or 2)")
def lp_normalization(node):
    tf = _tf()
    float_input(node)
    x = node.t(0)
    axis = node.attr("axis")
    if node.attr("p") == 1:
        norm = tf.reduce_sum(tf.abs(x), axis, keepdims=True)
    else:
        norm = tf.sqrt(tf.reduce_sum(x * x, axis, keepdims=True))
    return x / norm


@op("LRN", attrs={"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": REQUIRED})
def lrn(node):
    tf = _tf()
    dtype = float_input(node)
    x = node.t(0)
    rank = node.rank(0)
    size = int(node.attr("size"))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = x * x
    pads = [[0, 0]] * rank
    pads[1] = [lo, hi]
    sqp = tf.pad(sq, pads)
    channels = tf.shape(x)[1]
    total = None
    for k in range(size):
        part = tf.gather(sqp, tf.range(k, k + channels), axis=1)
        total = part if total is None else total + part
    alpha = tf.cast(node.attr("alpha") / size, dtype)
    return x / tf.pow(tf.cast(node.attr("bias"), dtype) + alpha * total,
                      tf.cast(node.attr("beta"), dtype))


@op("MeanVarianceNormalization", attrs={"axes": [0, 2, 3]})
def mean_variance_normalization(node):
    tf = _tf()
    dtype = float_input(node)
    x = node.t(0)
    axes = list(node.attr("axes"))
    mean = tf.reduce_mean(x, axes, keepdims=True)
    var = tf.reduce_mean(x * x, axes, keepdims=True) - mean * mean
    return (x - mean) / (tf.sqrt(var) + tf.cast(1e-9, dtype))
