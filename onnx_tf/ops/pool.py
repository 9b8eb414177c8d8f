"""ONNX pooling ops (max with indices, average, Lp, global, MaxUnpool) in ONNX
semantics, over the NC<spatial> layout. MaxPool, AveragePool's common forms and
the global poolings run on a channel-last input as it is held and keep their
output channel-last (onnx_tf/layout.py)."""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.spatial import (
    FLOATS,
    attr_list,
    check_auto_pad,
    crop_to,
    emit_last,
    float_input,
    last_input,
    pad_spatial_first,
    shift_reduce,
    window_pads,
    window_sum,
)
from tfx_bridge.onnx_tf.registry import REQUIRED, op


def _check_pool(info: NodeInfo) -> Optional[str]:
    refusal = check_auto_pad(info)
    if refusal:
        return refusal
    if info.attrs.get("ceil_mode") and info.attrs.get("auto_pad", "NOTSET") != "NOTSET":
        return "ceil_mode with auto_pad is not supported"
    return None


def _pool_setup(node):
    rank = node.rank(0)
    nd = rank - 2
    if nd < 1:
        node.refuse("pooling needs at least one spatial dimension")
    kernel = list(node.attr("kernel_shape"))
    if len(kernel) != nd:
        node.refuse(f"kernel_shape {kernel} does not match {nd} spatial dimensions")
    strides = attr_list(node, "strides", nd, 1)
    dilations = attr_list(node, "dilations", nd, 1)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    begin, end, outs = window_pads(node, kernel, strides, dilations, ceil_mode)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    return rank, nd, kernel, strides, dilations, begin, end, outs, eff


def _lowest(dtype):
    if dtype.is_floating:
        return -np.inf
    return dtype.min


@op("MaxPool", attrs={"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None,
                      "kernel_shape": REQUIRED, "pads": None, "storage_order": 0,
                      "strides": None}, check=_check_pool)
def max_pool(node):
    tf = _tf()
    _, nd, kernel, strides, dilations, begin, end, outs, eff = _pool_setup(node)
    dtype = node.dtype(0)
    if dtype.name not in (*FLOATS, "int8", "uint8"):
        node.refuse(f"MaxPool on {dtype.name} is not supported", "use float or (u)int8")
    want_indices = len(node.proto.output) > 1 and node.proto.output[1]
    if not want_indices and all(d == 1 for d in dilations) and dtype.is_floating and nd <= 3:
        xp = pad_spatial_first(last_input(node), begin, end, _lowest(dtype), nd, outs,
                               strides, eff, last=True)
        y = tf.nn.max_pool(xp, kernel, strides, "VALID")
        return emit_last(node, crop_to(y, outs, last=True))
    x = node.t(0)
    xp = pad_spatial_first(x, begin, end, _lowest(dtype), nd, outs, strides, eff)
    if want_indices:
        return _max_pool_indices(node, x, xp, kernel, strides, dilations, begin, outs)
    return shift_reduce(xp, kernel, strides, dilations, outs,
                         lambda acc, part, _: part if acc is None else tf.maximum(acc, part))


def _max_pool_indices(node, x, xp, kernel, strides, dilations, begin, outs):
    """MaxPool with its Indices output: flat indices into X (N, C included), row-major
    (storage_order 0) or column-major over the spatial dims; the first maximum wins."""
    tf = _tf()
    nd = len(kernel)
    static = x.shape.as_list()
    if any(d is None for d in static[2:]) or any(not isinstance(o, int) for o in outs):
        node.refuse("MaxPool Indices with dynamic spatial dimensions is not supported",
                    "declare fixed spatial sizes for the input (e.g. image:float32:-1,3,32,32) "
                    "or do not return the pooling indices")
    spatial = static[2:]
    order = list(range(nd)) if node.attr("storage_order") == 0 else list(reversed(range(nd)))
    step = {}
    acc_step = 1
    for a in reversed(order):
        step[a] = acc_step
        acc_step *= spatial[a]
    plane = acc_step
    best = None
    best_idx = None
    for offset in itertools.product(*[range(k) for k in kernel]):
        sl = [slice(None), slice(None)]
        idx = np.zeros(outs, np.int64)
        for a in range(nd):
            start = offset[a] * dilations[a]
            sl.append(slice(start, start + (outs[a] - 1) * strides[a] + 1, strides[a]))
            pos = np.arange(outs[a]) * strides[a] + start - begin[a]
            shape = [1] * nd
            shape[a] = outs[a]
            idx = idx + (pos * step[a]).reshape(shape)
        part = xp[tuple(sl)]
        idx_t = tf.constant(idx[None, None])
        if best is None:
            best, best_idx = part, tf.broadcast_to(idx_t, tf.shape(part, out_type=tf.int32))
        else:
            better = part > best
            best = tf.where(better, part, best)
            best_idx = tf.where(better, idx_t, best_idx)
    shape = tf.shape(x, out_type=tf.int64)
    nc = tf.reshape(tf.range(shape[0] * shape[1]) * plane, tf.stack([shape[0], shape[1]]))
    nc = tf.reshape(nc, tf.concat([tf.shape(nc, out_type=tf.int64),
                                   tf.ones([nd], tf.int64)], 0))
    return [best, best_idx + nc]


@op("AveragePool", attrs={"auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0,
                          "dilations": None, "kernel_shape": REQUIRED, "pads": None,
                          "strides": None}, check=_check_pool)
def average_pool(node):
    tf = _tf()
    _, nd, kernel, strides, dilations, begin, end, outs, eff = _pool_setup(node)
    dtype = float_input(node)
    no_pad = not any(begin) and not any(end)
    simple = all(d == 1 for d in dilations) and not node.attr("ceil_mode") and nd <= 3
    if simple and (no_pad or node.attr("count_include_pad")):
        # Zero pads counted as taps: the kernel's VALID average over the padded input.
        xp = pad_spatial_first(last_input(node), begin, end, 0, nd, last=True)
        return emit_last(node, tf.nn.avg_pool(xp, kernel, strides, "VALID"))
    x = node.t(0)
    xp = pad_spatial_first(x, begin, end, 0, nd, outs, strides, eff)
    total = window_sum(xp, kernel, strides, dilations, outs)
    count = _pool_count(node, x, begin, end, outs, kernel, strides, dilations, eff,
                        bool(node.attr("count_include_pad")), dtype)
    return total / count


def _pool_count(node, x, begin, end, outs, kernel, strides, dilations, eff, include_pad,
                dtype):
    """How many elements each window averages. With count_include_pad every tap counts,
    the ceil_mode tail too (ONNX's reference and node tests; PyTorch leaves the tail out);
    without, only the input's elements."""
    tf = _tf()
    nd = len(kernel)
    if include_pad:
        return tf.constant(float(np.prod(kernel)), dtype)
    static = x.shape.as_list()[2:]
    if all(d is not None for d in static) and all(isinstance(o, int) for o in outs):
        counts = np.ones([1], np.float64)
        for a in range(nd):
            n = static[a]
            need = (outs[a] - 1) * strides[a] + eff[a]
            mask = np.zeros(max(need, begin[a] + n), np.float64)
            mask[begin[a]:begin[a] + n] = 1
            c = np.array([sum(mask[o * strides[a] + k * dilations[a]] for k in range(kernel[a]))
                          for o in range(outs[a])])
            counts = np.multiply.outer(counts, c)
        counts = counts.reshape([1, 1, *outs])
        return tf.constant(counts.astype(dtype.as_numpy_dtype))
    mask = pad_spatial_first(tf.ones_like(x[:1, :1]), begin, end, 0, nd, outs, strides, eff)
    return window_sum(mask, kernel, strides, dilations, outs)


@op("LpPool", attrs={"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None,
                     "kernel_shape": REQUIRED, "p": 2, "pads": None, "strides": None},
    check=_check_pool)
def lp_pool(node):
    tf = _tf()
    _, nd, kernel, strides, dilations, begin, end, outs, eff = _pool_setup(node)
    float_input(node)
    x = node.t(0)
    p = node.attr("p")
    xp = pad_spatial_first(x, begin, end, 0, nd, outs, strides, eff)
    total = window_sum(tf.pow(tf.abs(xp), tf.cast(p, x.dtype)), kernel, strides, dilations,
                        outs)
    return tf.pow(total, tf.cast(1.0 / p, x.dtype))


def _global(node, reduce):
    """reduce over the spatial axes, on the input as it is held."""
    x, perm = node.physical(0)
    rank = node.rank(0)
    if perm is None:
        return reduce(x, axis=list(range(2, rank)), keepdims=True)
    y = reduce(x, axis=sorted(perm.index(a) for a in range(2, rank)), keepdims=True)
    return node.emit(y, perm)


@op("GlobalAveragePool")
def global_average_pool(node):
    float_input(node)
    return _global(node, _tf().reduce_mean)


@op("GlobalMaxPool")
def global_max_pool(node):
    return _global(node, _tf().reduce_max)


@op("GlobalLpPool", attrs={"p": 2})
def global_lp_pool(node):
    tf = _tf()
    float_input(node)
    x = node.t(0)
    p = node.attr("p")
    total = tf.reduce_sum(tf.pow(tf.abs(x), tf.cast(p, x.dtype)),
                          axis=list(range(2, node.rank(0))), keepdims=True)
    return tf.pow(total, tf.cast(1.0 / p, x.dtype))


@op("MaxUnpool", attrs={"kernel_shape": REQUIRED, "pads": None, "strides": None})
def max_unpool(node):
    tf = _tf()
    x = node.t(0)
    rank = node.rank(0)
    nd = rank - 2
    kernel = list(node.attr("kernel_shape"))
    strides = attr_list(node, "strides", nd, 1)
    pads = list(node.attr("pads") or [0] * (2 * nd))
    shape = node.dyn_shape(0)
    spatial = [(shape[a + 2] - 1) * strides[a] + kernel[a] - pads[a] - pads[a + nd]
               for a in range(nd)]
    if isinstance(shape, np.ndarray):
        inferred = np.array([shape[0], shape[1], *spatial], np.int64)
    else:
        inferred = tf.stack([shape[0], shape[1], *spatial])
    # Indices address the inferred shape (ONNX's reference); output_shape pads its end.
    total = tf.reduce_prod(inferred)
    indices = tf.reshape(tf.cast(node.t(1), tf.int64), [-1, 1])
    flat = tf.tensor_scatter_nd_update(tf.zeros(tf.reshape(total, [1]), x.dtype), indices,
                                       tf.reshape(x, [-1]))
    y = tf.reshape(flat, inferred)
    if node.has(2):
        out_shape = tf.cast(node.t(2), tf.int64)
        extra = tf.maximum(out_shape - tf.cast(inferred, tf.int64), 0)
        y = tf.pad(y, tf.stack([tf.zeros_like(extra), extra], 1))
    return y
