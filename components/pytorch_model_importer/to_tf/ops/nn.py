"""ONNX nn ops in ONNX semantics (see to_tf/core.py for the handler contract).

Convolution, pooling, normalization and resampling. Tensors stay in ONNX's
NC<spatial> layout; Conv and pooling transpose locally to channel-last around
TF's kernels (the only ones TF has on CPU with oneDNN off). Grouped
convolution, which has no CPU kernel, runs as depthwise or as split + concat.
ConvTranspose runs as a stride-1 convolution over the zero-upsampled input
with the flipped kernel, so 1-D/2-D/3-D, dilations, groups and any pads share
one exact path. Resize and GridSample compute ONNX's source coordinates per
axis and gather/interpolate on the NC<spatial> tensor (no tf.image kernels,
whose coordinate conventions differ).
"""
from __future__ import annotations

import itertools
import math
from typing import List, Optional, Sequence

import numpy as np

from tfx_bridge.components.pytorch_model_importer.to_tf.core import REQUIRED, NodeInfo, op

_FLOATS = ("float16", "float32", "float64")


def _tf():
    import tensorflow as tf
    return tf


# --------------------------------------------------------------------------- helpers


def _tensor(node, array: np.ndarray):
    """A numpy array computed by a handler (e.g. transposed weights) as a tensor; large
    ones become tracked variables so they are saved with the model."""
    return node.graph.converter.tensor(np.ascontiguousarray(array), node.folding)


def _to_last(x, rank: int):
    return _tf().transpose(x, [0, *range(2, rank), 1])


def _to_first(x, rank: int):
    return _tf().transpose(x, [0, rank - 1, *range(1, rank - 1)])


def _float_input(node, i: int = 0, what: str = "X"):
    dtype = node.dtype(i)
    if dtype.name not in _FLOATS:
        node.refuse(f"{what} of type {dtype.name} is not supported",
                    "use float16/float32/float64")
    return dtype


def _check_auto_pad(info: NodeInfo) -> Optional[str]:
    auto_pad = info.attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        return f"auto_pad={auto_pad!r} is not supported"
    return None


def _spatial(node, i: int, what: str = "spatial dimensions") -> List[int]:
    dims = node.shape(i)[2:]
    if any(d is None for d in dims):
        node.refuse(f"{what} must be static here (input {i} has shape {node.shape(i)})",
                    "export with fixed spatial sizes")
    return dims


def _window_pads(node, kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int], ceil_mode: bool = False):
    """(pads_begin, pads_end, out_sizes) of a conv/pool window; out sizes are ints or
    (for dynamic inputs with explicit pads) scalar tensors."""
    tf = _tf()
    nd = len(kernel)
    auto_pad = node.attr("auto_pad", "NOTSET")
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        ins = _spatial(node, 0, f"spatial dimensions with auto_pad={auto_pad}")
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
            if dyn is None:
                dyn = tf.shape(node.t(0))
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


def _attr_list(node, name: str, nd: int, default: int) -> List[int]:
    value = node.attr(name)
    return list(value) if value else [default] * nd


def _pad_spatial_first(x, begin, end, value, nd: int, out_sizes=None, strides=None,
                       eff=None):
    """Pads an NC<spatial> tensor; with ``out_sizes`` the end pad is set so that exactly
    the windows of ``out_sizes`` fit (ceil_mode extra, or cropping the unused tail)."""
    tf = _tf()
    pads = [[0, 0], [0, 0]]
    shape = None
    for a in range(nd):
        e = end[a]
        if out_sizes is not None:
            need = (out_sizes[a] - 1) * strides[a] + eff[a]
            n = x.shape[a + 2]
            if n is None:
                shape = tf.shape(x) if shape is None else shape
                n = shape[a + 2]
            e = need - n - begin[a]
            if not isinstance(e, int):
                e = tf.maximum(e, 0)
            else:
                e = max(e, 0)
        pads.append([begin[a], e])
    if all(isinstance(p, int) and p == 0 for pair in pads for p in pair):
        return x
    if any(not isinstance(p, int) for pair in pads for p in pair):
        pads = tf.stack([tf.stack([tf.cast(p, tf.int32) for p in pair]) for pair in pads])
    return tf.pad(x, pads, constant_values=value)


def _shift_reduce(x, kernel, strides, dilations, out_sizes, combine):
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


def _window_sum(x, kernel, strides, dilations, out_sizes):
    """Sum over windows of an (already padded) NC<spatial> tensor."""
    tf = _tf()
    nd = len(kernel)
    if all(d == 1 for d in dilations) and x.dtype.name in ("float32", "float64", "float16") \
            and nd <= 3:
        rank = nd + 2
        y = tf.nn.avg_pool(_to_last(x, rank), kernel, strides, "VALID")
        y = _to_first(y, rank) * tf.cast(int(np.prod(kernel)), x.dtype)
        return _crop_to(y, out_sizes)
    return _shift_reduce(x, kernel, strides, dilations, out_sizes,
                         lambda acc, part, _: part if acc is None else acc + part)


def _crop_to(y, out_sizes):
    tf = _tf()
    if all(isinstance(o, int) for o in out_sizes):
        if list(y.shape[2:]) == list(out_sizes):
            return y
        return y[(slice(None), slice(None), *[slice(0, o) for o in out_sizes])]
    size = tf.concat([[-1, -1], tf.stack([tf.cast(o, tf.int32) for o in out_sizes])], 0)
    return tf.slice(y, tf.zeros([len(out_sizes) + 2], tf.int32), size)


# --------------------------------------------------------------------------- Conv


def _conv_last(x, w, strides, dilations):
    """VALID convolution of a channel-last tensor; strided + dilated runs at stride 1
    and subsamples (exact; TF rejects the combination)."""
    tf = _tf()
    if any(d > 1 for d in dilations) and any(s > 1 for s in strides):
        y = tf.nn.convolution(x, w, strides=1, padding="VALID", dilations=dilations)
        return y[(slice(None), *[slice(None, None, s) for s in strides], slice(None))]
    return tf.nn.convolution(x, w, strides=strides, padding="VALID", dilations=dilations)


def _depthwise_last(x, w, strides, dilations):
    tf = _tf()
    if any(d > 1 for d in dilations) and any(s > 1 for s in strides):
        y = tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "VALID", dilations=dilations)
        return y[:, ::strides[0], ::strides[1], :]
    return tf.nn.depthwise_conv2d(x, w, [1, *strides, 1], "VALID", dilations=dilations)


def _weights_last(node, i: int, flip: bool = False, transpose_io: bool = False):
    """ONNX weights [O, I, k...] as TF [k..., I, O] (numpy when constant). With
    ``transpose_io`` the ONNX layout is [I, O, k...] (ConvTranspose)."""
    tf = _tf()
    w = node.value(i)
    rank = node.rank(i)
    perm = [*range(2, rank), 0, 1] if transpose_io else [*range(2, rank), 1, 0]
    if isinstance(w, np.ndarray):
        if flip:
            w = w[(slice(None), slice(None), *[slice(None, None, -1)] * (rank - 2))]
        return np.transpose(w, perm)
    if flip:
        w = tf.reverse(w, list(range(2, rank)))
    return tf.transpose(w, perm)


def _as_t(node, w):
    return _tensor(node, w) if isinstance(w, np.ndarray) else w


def _grouped_conv(node, x_last, w_last, group: int, strides, dilations, allow_depthwise=True):
    """x_last [N, s..., C], w_last [k..., C/g, M] -> [N, s'..., M]."""
    tf = _tf()
    nd = len(strides)
    cin_g = w_last.shape[-2]
    m = w_last.shape[-1]
    if group == 1:
        return _conv_last(x_last, _as_t(node, w_last), strides, dilations)
    if m % group:
        node.refuse(f"{m} output channels are not divisible by group={group}")
    if allow_depthwise and nd == 2 and cin_g == 1 and strides[0] == strides[1]:
        # Depthwise: TF output channel c*mult + k is ONNX output channel c*mult + k.
        mult = m // group
        if isinstance(w_last, np.ndarray):
            w_dw = w_last.reshape(*w_last.shape[:2], group, mult)
        else:
            w_dw = tf.reshape(w_last, [*w_last.shape[:2], group, mult])
        return _depthwise_last(x_last, _as_t(node, w_dw), strides, dilations)
    xs = tf.split(x_last, group, axis=-1)
    mg = m // group
    outs = []
    for g in range(group):
        w_g = w_last[..., g * mg:(g + 1) * mg]
        outs.append(_conv_last(xs[g], _as_t(node, w_g), strides, dilations))
    return tf.concat(outs, axis=-1)


def _add_bias_last(node, y, i: int):
    if not node.has(i):
        return y
    tf = _tf()
    b = node.t(i)
    return y + tf.cast(b, y.dtype)


def _conv_setup(node, what: str):
    """Conv and ConvTranspose's shared reading: rank, spatial dims, weight shape, kernel,
    strides, dilations and group, each checked against the weights."""
    _float_input(node)
    rank = node.rank(0)
    nd = rank - 2
    if nd < 1 or nd > 3:
        node.refuse(f"{nd}-D {what} is not supported", "use 1-D, 2-D or 3-D")
    wshape = node.shape(1)
    kernel = list(node.attr("kernel_shape") or wshape[2:])
    if kernel != list(wshape[2:]):
        node.refuse(f"kernel_shape {kernel} differs from the weights' {wshape[2:]}")
    strides = _attr_list(node, "strides", nd, 1)
    dilations = _attr_list(node, "dilations", nd, 1)
    return rank, nd, wshape, kernel, strides, dilations, int(node.attr("group"))


@op("Conv", attrs={"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                   "pads": None, "strides": None}, check=_check_auto_pad)
def conv(node):
    tf = _tf()
    rank, nd, wshape, kernel, strides, dilations, group = _conv_setup(node, "convolution")
    cin = node.shape(0)[1]
    if cin is not None and cin != wshape[1] * group:
        node.refuse(f"input channels {cin} != weights' {wshape[1]} x group {group}")
    begin, end, _ = _window_pads(node, kernel, strides, dilations)
    x = _to_last(node.t(0), rank)
    if any(begin) or any(end):
        x = tf.pad(x, [[0, 0], *[[b, e] for b, e in zip(begin, end, strict=True)], [0, 0]])
    w = _weights_last(node, 1)
    if not isinstance(w, np.ndarray):
        w = tf.cast(w, x.dtype)
    else:
        w = w.astype(x.dtype.as_numpy_dtype)
    y = _grouped_conv(node, x, w, group, strides, dilations)
    y = _add_bias_last(node, y, 2)
    return _to_first(y, rank)


def _upsample_zeros(x, axis: int, stride: int):
    """Inserts stride-1 zeros between elements along ``axis``: L -> (L-1)*stride+1."""
    tf = _tf()
    if stride == 1:
        return x
    y = tf.expand_dims(x, axis + 1)
    rank = len(x.shape) + 1
    pads = [[0, 0]] * rank
    pads[axis + 1] = [0, stride - 1]
    y = tf.pad(y, pads)
    shape = tf.shape(y)
    new_shape = tf.concat([shape[:axis], [shape[axis] * stride], shape[axis + 2:]], 0)
    y = tf.reshape(y, new_shape)
    length = tf.shape(x)[axis]
    begin = [0] * len(x.shape)
    size = [-1] * len(x.shape)
    size = tf.tensor_scatter_nd_update(tf.constant(size), [[axis]],
                                       [(length - 1) * stride + 1])
    y = tf.slice(y, begin, size)
    static = x.shape.as_list()
    if static[axis] is not None:
        static[axis] = (static[axis] - 1) * stride + 1
    y.set_shape(static)
    return y


@op("ConvTranspose", attrs={"auto_pad": "NOTSET", "dilations": None, "group": 1,
                            "kernel_shape": None, "output_padding": None, "output_shape": None,
                            "pads": None, "strides": None}, check=_check_auto_pad)
def conv_transpose(node):
    tf = _tf()
    rank, nd, wshape, kernel, strides, dilations, group = _conv_setup(node, "ConvTranspose")
    out_pad = list(node.attr("output_padding") or [0] * nd)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    auto_pad = node.attr("auto_pad")
    output_shape = node.attr("output_shape")
    if output_shape is not None and len(output_shape) == rank:
        output_shape = list(output_shape)[2:]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        ins = _spatial(node, 0, "spatial dimensions with output_shape or auto_pad SAME")
        if output_shape is None:
            output_shape = [n * s for n, s in zip(ins, strides, strict=True)]
        total = [s * (n - 1) + op_ + e - o for s, n, op_, e, o in
                 zip(strides, ins, out_pad, eff, output_shape, strict=True)]
        if auto_pad == "SAME_UPPER":
            begin = [t // 2 for t in total]
            end = [t - t // 2 for t in total]
        else:
            begin = [t - t // 2 for t in total]
            end = [t // 2 for t in total]
    elif auto_pad == "VALID":
        begin, end = [0] * nd, [0] * nd
    else:
        pads = list(node.attr("pads") or [0] * (2 * nd))
        begin, end = pads[:nd], pads[nd:]
    x = _to_last(node.t(0), rank)
    for a in range(nd):
        x = _upsample_zeros(x, a + 1, strides[a])
    # Full correlation pads eff-1 on each side; ONNX pads crop it, output_padding extends it.
    lo = [e - 1 - b for e, b in zip(eff, begin, strict=True)]
    hi = [e - 1 - p + op_ for e, p, op_ in zip(eff, end, out_pad, strict=True)]
    x = tf.pad(x, [[0, 0], *[[max(v, 0), max(h, 0)] for v, h in zip(lo, hi, strict=True)],
                   [0, 0]])
    if any(v < 0 for v in lo) or any(h < 0 for h in hi):
        x = x[(slice(None), *[slice(max(-v, 0), (-h if h < 0 else None))
                              for v, h in zip(lo, hi, strict=True)], slice(None))]
    cin = wshape[0]
    if cin % group:
        node.refuse(f"weights' {cin} input channels are not divisible by group={group}")
    w = node.value(1)
    cg = cin // group
    outs = []
    xs = tf.split(x, group, axis=-1) if group > 1 else [x]
    for g in range(group):
        if isinstance(w, np.ndarray):
            wg = w[g * cg:(g + 1) * cg]
            wg = wg[(slice(None), slice(None), *[slice(None, None, -1)] * nd)]
            wg = np.transpose(wg, [*range(2, rank), 0, 1]).astype(x.dtype.as_numpy_dtype)
            wg = _tensor(node, wg)
        else:
            wg = tf.cast(w[g * cg:(g + 1) * cg], x.dtype)
            wg = tf.transpose(tf.reverse(wg, list(range(2, rank))), [*range(2, rank), 0, 1])
        outs.append(_conv_last(xs[g], wg, [1] * nd, dilations))
    y = outs[0] if group == 1 else tf.concat(outs, -1)
    y = _add_bias_last(node, y, 2)
    return _to_first(y, rank)


@op("DeformConv", attrs={"dilations": None, "group": 1, "kernel_shape": None,
                         "offset_group": 1, "pads": None, "strides": None},
    check=lambda info: "DeformConv is not implemented")
def deform_conv(node):
    node.refuse("DeformConv is not implemented", "replace deformable convolution")


# --------------------------------------------------------------------------- pooling


def _check_pool(info: NodeInfo) -> Optional[str]:
    refusal = _check_auto_pad(info)
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
    strides = _attr_list(node, "strides", nd, 1)
    dilations = _attr_list(node, "dilations", nd, 1)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    begin, end, outs = _window_pads(node, kernel, strides, dilations, ceil_mode)
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
    rank, nd, kernel, strides, dilations, begin, end, outs, eff = _pool_setup(node)
    x = node.t(0)
    dtype = x.dtype
    if dtype.name not in (*_FLOATS, "int8", "uint8"):
        node.refuse(f"MaxPool on {dtype.name} is not supported", "use float or (u)int8")
    want_indices = len(node.proto.output) > 1 and node.proto.output[1]
    xp = _pad_spatial_first(x, begin, end, _lowest(dtype), nd, outs, strides, eff)
    if want_indices:
        return _max_pool_indices(node, x, xp, kernel, strides, dilations, begin, outs)
    if all(d == 1 for d in dilations) and dtype.is_floating and nd <= 3:
        y = tf.nn.max_pool(_to_last(xp, rank), kernel, strides, "VALID")
        return _crop_to(_to_first(y, rank), outs)
    return _shift_reduce(xp, kernel, strides, dilations, outs,
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
    rank, nd, kernel, strides, dilations, begin, end, outs, eff = _pool_setup(node)
    dtype = _float_input(node)
    x = node.t(0)
    no_pad = not any(begin) and not any(end)
    if no_pad and all(d == 1 for d in dilations) and not node.attr("ceil_mode") and nd <= 3:
        y = tf.nn.avg_pool(_to_last(x, rank), kernel, strides, "VALID")
        return _to_first(y, rank)
    xp = _pad_spatial_first(x, begin, end, 0, nd, outs, strides, eff)
    total = _window_sum(xp, kernel, strides, dilations, outs)
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
    mask = _pad_spatial_first(tf.ones_like(x[:1, :1]), begin, end, 0, nd, outs, strides, eff)
    return _window_sum(mask, kernel, strides, dilations, outs)


@op("LpPool", attrs={"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None,
                     "kernel_shape": REQUIRED, "p": 2, "pads": None, "strides": None},
    check=_check_pool)
def lp_pool(node):
    tf = _tf()
    _, nd, kernel, strides, dilations, begin, end, outs, eff = _pool_setup(node)
    _float_input(node)
    x = node.t(0)
    p = node.attr("p")
    xp = _pad_spatial_first(x, begin, end, 0, nd, outs, strides, eff)
    total = _window_sum(tf.pow(tf.abs(xp), tf.cast(p, x.dtype)), kernel, strides, dilations,
                        outs)
    return tf.pow(total, tf.cast(1.0 / p, x.dtype))


@op("GlobalAveragePool")
def global_average_pool(node):
    _float_input(node)
    return _tf().reduce_mean(node.t(0), axis=list(range(2, node.rank(0))), keepdims=True)


@op("GlobalMaxPool")
def global_max_pool(node):
    return _tf().reduce_max(node.t(0), axis=list(range(2, node.rank(0))), keepdims=True)


@op("GlobalLpPool", attrs={"p": 2})
def global_lp_pool(node):
    tf = _tf()
    _float_input(node)
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
    strides = _attr_list(node, "strides", nd, 1)
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


# --------------------------------------------------------------------------- normalization


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
    dtype = _float_input(node)
    outputs = [o for o in node.proto.output[1:] if o]
    if outputs:
        node.refuse("the training outputs (running mean/var, saved mean/var) are not "
                    "supported", "export the model in eval mode")
    x = node.t(0)
    rank = node.rank(0)
    shape = _channel_shape(rank) if rank > 1 else [-1]
    scale, bias, mean, var = (tf.reshape(tf.cast(node.t(i), dtype), shape) for i in (1, 2, 3, 4))
    inv = scale / tf.sqrt(var + tf.cast(node.attr("epsilon"), dtype))
    return (x - mean) * inv + bias


@op("InstanceNormalization", attrs={"epsilon": 1e-5})
def instance_normalization(node):
    tf = _tf()
    dtype = _float_input(node)
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
    dtype = _float_input(node)
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
    dtype = _float_input(node)
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
    _float_input(node)
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
    dtype = _float_input(node)
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
    dtype = _float_input(node)
    x = node.t(0)
    axes = list(node.attr("axes"))
    mean = tf.reduce_mean(x, axes, keepdims=True)
    var = tf.reduce_mean(x * x, axes, keepdims=True) - mean * mean
    return (x - mean) / (tf.sqrt(var) + tf.cast(1e-9, dtype))


# --------------------------------------------------------------------------- Resize


_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _check_resize(info: NodeInfo) -> Optional[str]:
    a = info.attrs
    mode = a.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic", "bilinear", "trilinear"):
        return f"mode={mode!r} is not supported"
    if a.get("coordinate_transformation_mode", "half_pixel") not in _COORD_MODES:
        return f"coordinate_transformation_mode={a['coordinate_transformation_mode']!r} " \
               "is not supported"
    if a.get("nearest_mode", "round_prefer_floor") not in _NEAREST_MODES:
        return f"nearest_mode={a['nearest_mode']!r} is not supported"
    if a.get("keep_aspect_ratio_policy", "stretch") not in ("stretch", "not_larger",
                                                            "not_smaller"):
        return f"keep_aspect_ratio_policy={a['keep_aspect_ratio_policy']!r} is not supported"
    if a.get("antialias"):
        return "antialias=1 is not supported"
    return None


def _resize_axis(x, axis: int, in_len, out_len, scale, roi_start, roi_end, attrs,
                 compute):
    """Resamples ``x`` along ``axis`` with ONNX's coordinate formula for this axis.
    ``in_len``/``out_len`` are int64 scalars (tensors or ints), ``scale`` float64."""
    tf = _tf()
    mode = attrs["mode"]
    ctm = attrs["coordinate_transformation_mode"]
    f64 = tf.float64
    in_f = tf.cast(in_len, f64)
    out_int = tf.cast(out_len, f64)
    xr = tf.cast(tf.range(tf.cast(out_len, tf.int64)), f64)
    scale = tf.cast(scale, f64)
    # ONNX's reference uses the unrounded length in_len * scale where the spec says
    # "length_resized" (the node tests follow it); with sizes the two are equal.
    out_f = in_f * scale
    denom = tf.where(tf.equal(out_f, 1), tf.ones_like(out_f), out_f - 1)
    if ctm == "half_pixel":
        xo = (xr + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        adjustment = out_int / out_f
        center = in_f / 2
        offset = center * (1 - adjustment)
        xo = offset + (xr + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        xo = tf.where(out_f > 1, (xr + 0.5) / scale - 0.5, tf.zeros_like(xr))
    elif ctm == "align_corners":
        xo = tf.where(out_f == 1, tf.zeros_like(xr),
                      xr * (in_f - 1) / denom)
    elif ctm == "asymmetric":
        xo = xr / scale
    elif ctm == "tf_half_pixel_for_nn":
        xo = (xr + 0.5) / scale
    else:  # tf_crop_and_resize
        start, end = tf.cast(roi_start, f64), tf.cast(roi_end, f64)
        xo = tf.where(out_f > 1,
                      start * (in_f - 1) + xr * (end - start) * (in_f - 1)
                      / denom,
                      tf.fill(tf.shape(xr), 0.5 * (start + end) * (in_f - 1)))
    in_i = tf.cast(in_len, tf.int64)
    rank = len(x.shape)
    wshape = [1] * rank
    wshape[axis] = -1
    outside = None
    if ctm == "tf_crop_and_resize":
        outside = tf.logical_or(xo < 0, xo > in_f - 1)
    if mode == "nearest":
        nm = attrs["nearest_mode"]
        fl = tf.floor(xo)
        frac = xo - fl
        if nm == "round_prefer_floor":
            idx = tf.where(frac > 0.5, fl + 1, fl)
        elif nm == "round_prefer_ceil":
            idx = tf.where(frac >= 0.5, fl + 1, fl)
        elif nm == "floor":
            idx = fl
        else:
            idx = tf.math.ceil(xo)
        idx = tf.clip_by_value(tf.cast(idx, tf.int64), 0, in_i - 1)
        y = tf.gather(x, idx, axis=axis)
    else:
        fl = tf.floor(xo)
        t = xo - fl
        base = tf.cast(fl, tf.int64)
        if mode == "cubic":
            a = attrs["cubic_coeff_a"]
            t1, t2 = t + 1, 2 - t
            weights = [((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a,
                       ((a + 2) * t - (a + 3)) * t * t + 1,
                       ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                       ((a * t2 - 5 * a) * t2 + 8 * a) * t2 - 4 * a]
            offsets = [-1, 0, 1, 2]
        else:
            weights = [1 - t, t]
            offsets = [0, 1]
        taps = [base + o for o in offsets]
        if attrs["exclude_outside"]:
            weights = [tf.where(tf.logical_or(i < 0, i >= in_i), tf.zeros_like(w), w)
                       for w, i in zip(weights, taps, strict=True)]
            norm = tf.add_n(weights)
            weights = [w / norm for w in weights]
        y = None
        for w, i in zip(weights, taps, strict=True):
            part = tf.gather(x, tf.clip_by_value(i, 0, in_i - 1), axis=axis)
            part = part * tf.reshape(tf.cast(w, compute), wshape)
            y = part if y is None else y + part
    if outside is not None:
        fill = tf.cast(attrs["extrapolation_value"], y.dtype)
        y = tf.where(tf.reshape(outside, wshape), fill, y)
    return y


@op("Resize", attrs={"mode": "nearest", "coordinate_transformation_mode": "half_pixel",
                     "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
                     "nearest_mode": "round_prefer_floor", "antialias": 0, "axes": None,
                     "keep_aspect_ratio_policy": "stretch"}, check=_check_resize)
def resize(node):
    attrs = dict(node.attrs)
    if node.opset < 11:
        # Resize-10: (X, scales), asymmetric coordinates, nearest rounds down.
        attrs["coordinate_transformation_mode"] = "asymmetric"
        attrs["nearest_mode"] = "floor"
        return _resize(node, attrs, None, node.value(1), None)
    return _resize(node, attrs, node.value(1), node.value(2), node.value(3))


def _present(value):
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return value if value.size else None
    dims = value.shape.as_list()
    if dims and dims[0] == 0:
        return None
    return value


def _resize(node, attrs, roi, scales, sizes):
    tf = _tf()
    x = node.t(0)
    rank = node.rank(0)
    mode = attrs["mode"]
    if mode in ("bilinear", "trilinear"):
        mode = attrs["mode"] = "linear"
    dtype = node.dtype(0)
    if mode != "nearest" and dtype.name not in _FLOATS:
        node.refuse(f"{mode} Resize of {dtype.name} is not supported", "resize float tensors")
    axes = attrs.get("axes")
    axes = [a + rank if a < 0 else a for a in axes] if axes else list(range(rank))
    n_axes = len(axes)
    roi, scales, sizes = _present(roi), _present(scales), _present(sizes)
    if (scales is None) == (sizes is None):
        node.refuse("Resize needs exactly one of scales and sizes")
    in_shape = node.dyn_shape(0)
    policy = attrs["keep_aspect_ratio_policy"]
    f64 = tf.float64
    # Per axis (in `axes` order): input length, output length, scale.
    in_lens = [in_shape[a] for a in axes]
    if scales is not None:
        if isinstance(scales, np.ndarray):
            scale_v = [float(s) for s in scales.astype(np.float64)]
            if any(s <= 0 for s in scale_v):
                node.refuse(f"scales {scale_v} must be positive")
        else:
            sc = tf.cast(scales, f64)
            scale_v = [sc[i] for i in range(n_axes)]
        out_lens = []
        for n, s in zip(in_lens, scale_v, strict=True):
            if isinstance(s, float) and isinstance(n, (np.integer, int)):
                out_lens.append(int(np.floor(float(n) * s)))
            else:
                out_lens.append(tf.cast(tf.floor(tf.cast(n, f64) * s), tf.int64))
    else:
        if isinstance(sizes, np.ndarray):
            size_v = [int(s) for s in sizes]
        else:
            sz = tf.cast(sizes, tf.int64)
            size_v = [sz[i] for i in range(n_axes)]
        ratios = []
        for n, s in zip(in_lens, size_v, strict=True):
            if isinstance(s, int) and isinstance(n, (np.integer, int)):
                ratios.append(s / int(n))
            else:
                ratios.append(tf.cast(s, f64) / tf.cast(n, f64))
        if policy != "stretch":
            if all(isinstance(r, float) for r in ratios):
                common = min(ratios) if policy == "not_larger" else max(ratios)
                scale_v = [common] * n_axes
                out_lens = [int(math.floor(common * int(n) + 0.5)) for n in in_lens]
            else:
                stacked = tf.stack([tf.cast(r, f64) for r in ratios])
                common = tf.reduce_min(stacked) if policy == "not_larger" else \
                    tf.reduce_max(stacked)
                scale_v = [common] * n_axes
                out_lens = [tf.cast(tf.floor(common * tf.cast(n, f64) + 0.5), tf.int64)
                            for n in in_lens]
        else:
            scale_v = ratios
            out_lens = size_v
    roi_v = None
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        if roi is None:
            node.refuse("tf_crop_and_resize needs the roi input")
        roi_v = roi.astype(np.float64) if isinstance(roi, np.ndarray) else tf.cast(roi, f64)
    compute = dtype
    y = x
    if dtype.name == "float16":
        compute = tf.float32
        y = tf.cast(x, compute)
    for j, a in enumerate(axes):
        start = end = None
        if roi_v is not None:
            start, end = roi_v[j], roi_v[j + n_axes]
        n, o, s = in_lens[j], out_lens[j], scale_v[j]
        identity = (isinstance(s, float) and s == 1.0 and isinstance(o, int)
                    and isinstance(n, (np.integer, int)) and int(n) == o
                    and (roi_v is None or (isinstance(roi_v, np.ndarray)
                                           and start == 0 and end == 1)))
        if identity:
            continue
        y = _resize_axis(y, a, n, o, s, start, end, attrs, compute)
        if isinstance(o, int):
            static = y.shape.as_list()
            static[a] = o
            y.set_shape(static)
    return tf.cast(y, dtype) if y.dtype != dtype else y


@op("Upsample", attrs={"mode": "nearest", "scales": None, "height_scale": None,
                       "width_scale": None},
    check=lambda info: None if info.attrs.get("mode", "nearest") in ("nearest", "linear",
                                                                    "bilinear")
    else f"mode={info.attrs.get('mode')!r} is not supported")
def upsample(node):
    attrs = {"mode": node.attr("mode"), "coordinate_transformation_mode": "asymmetric",
             "nearest_mode": "floor", "cubic_coeff_a": -0.75, "exclude_outside": 0,
             "extrapolation_value": 0.0, "keep_aspect_ratio_policy": "stretch", "axes": None}
    if node.has(1):
        scales = node.value(1)
    elif node.attr("scales") is not None:
        scales = np.array(node.attr("scales"), np.float32)
    else:
        node.refuse("Upsample with height_scale/width_scale (opset 1) is not supported",
                    "export at opset >= 9")
    return _resize(node, attrs, None, scales, None)


# --------------------------------------------------------------------------- GridSample


def _check_grid_sample(info: NodeInfo) -> Optional[str]:
    mode = info.attrs.get("mode") or ("linear" if info.opset >= 20 else "bilinear")
    if mode not in ("bilinear", "linear", "nearest", "bicubic", "cubic"):
        return f"mode={mode!r} is not supported"
    if info.attrs.get("padding_mode") not in ("zeros", "border", "reflection"):
        return f"padding_mode={info.attrs['padding_mode']!r} is not supported"
    return None


def _reflect(v, lo: float, hi: float):
    tf = _tf()
    rng = hi - lo
    if rng <= 0:
        return tf.zeros_like(v) + lo
    below = lo - v
    n = tf.floor(below / rng)
    r = below - n * rng
    even = tf.equal(tf.math.floormod(n, 2), 0)
    v_lo = tf.where(even, lo + r, hi - r)
    above = v - hi
    n2 = tf.floor(above / rng)
    r2 = above - n2 * rng
    even2 = tf.equal(tf.math.floormod(n2, 2), 0)
    v_hi = tf.where(even2, hi - r2, lo + r2)
    return tf.where(v < lo, v_lo, tf.where(v > hi, v_hi, v))


@op("GridSample", attrs={"align_corners": 0, "mode": None, "padding_mode": "zeros"},
    check=_check_grid_sample, since=16)
def grid_sample(node):
    tf = _tf()
    dtype = _float_input(node)
    mode = node.attr("mode") or ("linear" if node.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = node.attr("padding_mode")
    align = bool(node.attr("align_corners"))
    rank = node.rank(0)
    nd = rank - 2
    if node.opset < 20 and nd != 2:
        node.refuse(f"GridSample-16 takes 4-D inputs, got rank {rank}")
    dims = _spatial(node, 0, "GridSample input spatial dimensions")
    x = node.t(0)
    compute = tf.float64 if dtype == tf.float64 else tf.float32
    grid = tf.cast(node.t(1), compute)
    # Values as [N, D1..Dr, C] so gather_nd over the spatial index picks channel vectors.
    xl = tf.cast(_to_last(x, rank), compute)
    coords = []
    for a in range(nd):
        n = grid[..., nd - 1 - a]  # the grid's last axis lists x (width) first
        size = dims[a]
        c = (n + 1) / 2 * (size - 1) if align else ((n + 1) * size - 1) / 2
        coords.append(c)
    lo = [0.0 if align else -0.5 for _ in dims]
    hi = [d - 1.0 if align else d - 0.5 for d in dims]
    if mode == "nearest":
        coords = [tf.round(c) for c in coords]  # half to even, as PyTorch
    for a in range(nd):
        c = coords[a]
        outside = tf.logical_or(c < lo[a], c > hi[a])
        if padding == "border" and mode != "cubic":
            # Cubic + border clamps each tap, not the coordinate (PyTorch and onnxruntime;
            # ONNX's reference clamps both, which no node test covers).
            coords[a] = tf.where(outside, tf.clip_by_value(c, 0.0, dims[a] - 1.0), c)
        elif padding == "reflection":
            coords[a] = tf.where(outside, _reflect(c, lo[a], hi[a]), c)
    if mode == "nearest":
        taps = [[(tf.cast(c, tf.int64), tf.ones_like(c))] for c in coords]
    else:
        taps = []
        for c in coords:
            base = tf.floor(c)
            t = c - base
            b = tf.cast(base, tf.int64)
            if mode == "linear":
                taps.append([(b, 1 - t), (b + 1, t)])
            else:
                a_ = -0.75
                t1, t2 = t + 1, 2 - t
                w = [((a_ * t1 - 5 * a_) * t1 + 8 * a_) * t1 - 4 * a_,
                     ((a_ + 2) * t - (a_ + 3)) * t * t + 1,
                     ((a_ + 2) * (1 - t) - (a_ + 3)) * (1 - t) * (1 - t) + 1,
                     ((a_ * t2 - 5 * a_) * t2 + 8 * a_) * t2 - 4 * a_]
                taps.append([(b + o, wi) for o, wi in zip((-1, 0, 1, 2), w, strict=True)])
    y = None
    for combo in itertools.product(*taps):
        weight = None
        valid = None
        idxs = []
        for a, (i, w) in enumerate(combo):
            weight = w if weight is None else weight * w
            if padding == "zeros":
                ok = tf.logical_and(i >= 0, i < dims[a])
                valid = ok if valid is None else tf.logical_and(valid, ok)
            elif padding == "reflection":
                i = tf.cast(_reflect(tf.cast(i, compute), lo[a], hi[a]), tf.int64)
            idxs.append(tf.clip_by_value(i, 0, dims[a] - 1))
        if valid is not None:
            weight = tf.where(valid, weight, tf.zeros_like(weight))
        vals = tf.gather_nd(xl, tf.stack(idxs, -1), batch_dims=1)
        part = vals * weight[..., None]
        y = part if y is None else y + part
    return tf.cast(_to_first(y, rank), dtype)


# --------------------------------------------------------------------------- refused


@op("RoiAlign", attrs={"coordinate_transformation_mode": "half_pixel", "mode": "avg",
                       "output_height": 1, "output_width": 1, "sampling_ratio": 0,
                       "spatial_scale": 1.0},
    check=lambda info: "RoiAlign is not implemented")
def roi_align(node):
    node.refuse("RoiAlign is not implemented", "keep detection heads out of the served model")


@op("Col2Im", attrs={"dilations": None, "pads": None, "strides": None},
    check=lambda info: "Col2Im is not implemented")
def col2im(node):
    node.refuse("Col2Im is not implemented", "replace nn.Fold with standard tensor ops")
