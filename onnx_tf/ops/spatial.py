"""Shared by the ONNX conv and pool ops: spatial attributes, pads (explicit, SAME,
ceil mode) and windows over the NC<spatial> layout, run channel-last in TF's
kernels (the only ones TF has on CPU with oneDNN off). Inputs already held
channel-last are used as they are, and outputs stay channel-last for the next
layout-free op (onnx_tf/layout.py)."""
from __future__ import annotations

import itertools
from typing import List, Optional, Sequence

import numpy as np

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.layout import channel_last
from tfx_bridge.onnx_tf.lazy import tf as _tf

FLOATS = ("float16", "float32", "float64")


def tensor(node, array: np.ndarray):
    """A numpy array computed by a handler (e.g. transposed weights) as a tensor; large
    ones become tracked variables so they are saved with the model."""
    return node.graph.converter.tensor(np.ascontiguousarray(array), node.folding)


def to_last(x, rank: int):
    return _tf().transpose(x, [0, *range(2, rank), 1])


def to_first(x, rank: int):
    return _tf().transpose(x, [0, rank - 1, *range(1, rank - 1)])


def last_input(node, i: int = 0):
    """Input ``i`` (NC<spatial>) as a channel-last tensor: as held when it already is,
    else transposed (once per value)."""
    return node.held_as(i, channel_last(node.rank(i)))


def emit_last(node, y):
    """A channel-last result as the node's output (ONNX's NC<spatial> meaning)."""
    return node.emit(y, channel_last(len(y.shape)))


def float_input(node, i: int = 0, what: str = "X"):
    dtype = node.dtype(i)
    if dtype.name not in FLOATS:
        node.refuse(f"{what} of type {dtype.name} is not supported",
                    "use float16/float32/float64")
    return dtype


def check_auto_pad(info: NodeInfo) -> Optional[str]:
    auto_pad = info.attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        return f"auto_pad={auto_pad!r} is not supported"
    return None


def spatial(node, i: int, what: str = "spatial dimensions") -> List[int]:
    dims = node.shape(i)[2:]
    if any(d is None for d in dims):
        node.refuse(f"{what} must be static here (input {i} has shape {node.shape(i)})",
                    "export with fixed spatial sizes")
    return dims


def window_pads(node, kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int], ceil_mode: bool = False):
    """(pads_begin, pads_end, out_sizes) of a conv/pool window; out sizes are ints or
    (for dynamic inputs with explicit pads) scalar tensors."""
    tf = _tf()
    nd = len(kernel)
    auto_pad = node.attr("auto_pad", "NOTSET")
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        ins = spatial(node, 0, f"spatial dimensions with auto_pad={auto_pad}")
        outs = [-(-n // s) for n, s in zip(ins, strides, strict=True)]
        total = [max(0, (o - 1) * s + e - n)
                 for o, s, e, n in zip(outs, strides, eff, ins, strict=True)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return begin, end, outs
    if auto_pad == "VALID":
        begin, end = [0] * nd, [0] * nd
    else:
        pads = list(node.attr("pads") or [0] * (2 * nd))
        if len(pads) != 2 * nd:
            node.refuse(f"pads {pads} do not match the {nd} spatial dimensions")
        if any(p < 0 for p in pads):
            node.refuse(f"negative pads {pads} are not supported")
        begin, end = pads[:nd], pads[nd:]
    static = node.shape(0)[2:]
    dyn = None
    outs = []
    for a in range(nd):
        n = static[a]
        if n is None:
            if dyn is None:  # the input's shape, whatever axis order it is held in
                dyn = node.dyn_shape(0, tf.int32)
            n = dyn[a + 2]
            span = n + begin[a] + end[a] - eff[a]
            if ceil_mode:
                o = -((-span) // strides[a]) + 1
                o = tf.where((o - 1) * strides[a] >= n + begin[a], o - 1, o)
            else:
                o = span // strides[a] + 1
            outs.append(o)
            continue
        span = n + begin[a] + end[a] - eff[a]
        if ceil_mode:
            o = -((-span) // strides[a]) + 1
            if (o - 1) * strides[a] >= n + begin[a]:
                o -= 1
        else:
            o = span // strides[a] + 1
        outs.append(o)
    return begin, end, outs


def attr_list(node, name: str, nd: int, default: int) -> List[int]:
    value = node.attr(name)
    return list(value) if value else [default] * nd


def pad_spatial_first(x, begin, end, value, nd: int, out_sizes=None, strides=None,
                       eff=None, last: bool = False):
    """Pads an NC<spatial> tensor (N<spatial>C with ``last``); with ``out_sizes`` the end
    pad is set so that exactly the windows of ``out_sizes`` fit (ceil_mode extra, or
    cropping the unused tail)."""
    tf = _tf()
    first = 1 if last else 2  # the first spatial axis
    pads = [[0, 0]] if last else [[0, 0], [0, 0]]
    shape = None
    for a in range(nd):
        e = end[a]
        if out_sizes is not None:
            need = (out_sizes[a] - 1) * strides[a] + eff[a]
            n = x.shape[a + first]
            if n is None:
                shape = tf.shape(x) if shape is None else shape
                n = shape[a + first]
            e = need - n - begin[a]
            if not isinstance(e, int):
                e = tf.maximum(e, 0)
            else:
                e = max(e, 0)
        pads.append([begin[a], e])
    if last:
        pads.append([0, 0])
    if all(isinstance(p, int) and p == 0 for pair in pads for p in pair):
        return x
    if any(not isinstance(p, int) for pair in pads for p in pair):
        pads = tf.stack([tf.stack([tf.cast(p, tf.int32) for p in pair]) for pair in pads])
    return tf.pad(x, pads, constant_values=value)


def shift_reduce(x, kernel, strides, dilations, out_sizes, combine):
    """Window reduction over NC<spatial> by strided slices (one per kernel offset): any
    dilation, any rank, exact. ``combine(acc, slice, offset)`` folds one offset in."""
    tf = _tf()
    acc = None
    for offset in itertools.product(*[range(k) for k in kernel]):
        begin = [0, 0] + [o * d for o, d in zip(offset, dilations, strict=True)]
        end = [0, 0] + [o * d + (n - 1) * s + 1
                        for o, d, n, s in zip(offset, dilations, out_sizes, strides, strict=True)]
        if any(not isinstance(v, int) for v in end):
            end = tf.stack([tf.cast(v, tf.int32) for v in end])
        part = tf.strided_slice(x, begin, end, [1, 1, *strides],
                                begin_mask=3, end_mask=3)
        acc = combine(acc, part, offset)
    return acc


def window_sum(x, kernel, strides, dilations, out_sizes):
    """Sum over windows of an (already padded) NC<spatial> tensor."""
    tf = _tf()
    nd = len(kernel)
    if all(d == 1 for d in dilations) and x.dtype.name in ("float32", "float64", "float16") \
            and nd <= 3:
        rank = nd + 2
        y = tf.nn.avg_pool(to_last(x, rank), kernel, strides, "VALID")
        y = to_first(y, rank) * tf.cast(int(np.prod(kernel)), x.dtype)
        return crop_to(y, out_sizes)
    return shift_reduce(x, kernel, strides, dilations, out_sizes,
                         lambda acc, part, _: part if acc is None else acc + part)


def crop_to(y, out_sizes, last: bool = False):
    """The first ``out_sizes`` positions of each spatial axis (N<spatial>C with ``last``)."""
    tf = _tf()
    nd = len(out_sizes)
    spatial_dims = y.shape[1:1 + nd] if last else y.shape[2:]
    if all(isinstance(o, int) for o in out_sizes):
        if list(spatial_dims) == list(out_sizes):
            return y
        crop = [slice(0, o) for o in out_sizes]
        return y[(slice(None), *crop, slice(None))] if last else \
            y[(slice(None), slice(None), *crop)]
    sizes = tf.stack([tf.cast(o, tf.int32) for o in out_sizes])
    size = tf.concat([[-1], sizes, [-1]] if last else [[-1, -1], sizes], 0)
    return tf.slice(y, tf.zeros([nd + 2], tf.int32), size)
