"""ONNX Conv, ConvTranspose and DeformConv in ONNX semantics (see onnx_tf/core.py for
the handler contract).

The kernels run channel-last; an input already held channel-last is used as
it is and the output stays channel-last (onnx_tf/layout.py), with the bias as
a BiasAdd right after the convolution, the pattern TF's CPU remapper fuses
(Conv2D + BiasAdd + Relu/Relu6/Elu/LeakyRelu into one _FusedConv2D). 2-D pads
are Conv2D's explicit paddings, not a separate Pad. Grouped convolution,
which has no CPU kernel, runs as depthwise or as split + concat. ConvTranspose
runs as a stride-1 convolution over the zero-upsampled input with the flipped
kernel, so 1-D/2-D/3-D, dilations, groups and any pads share one exact path.
"""
from __future__ import annotations

import numpy as np

from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.spatial import (
    attr_list,
    check_auto_pad,
    emit_last,
    float_input,
    last_input,
    spatial,
    tensor,
    window_pads,
)
from tfx_bridge.onnx_tf.registry import op


def _padding(x, pads, explicit: bool = True):
    """(input, padding) for a channel-last kernel: 2-D pads as the kernel's explicit
    paddings (``explicit``), others as a Pad before a VALID kernel."""
    if pads is None or not any(p for pair in pads for p in pair):
        return x, "VALID"
    if explicit and len(pads) == 2:
        return x, [[0, 0], *[list(p) for p in pads], [0, 0]]
    return _tf().pad(x, [[0, 0], *[list(p) for p in pads], [0, 0]]), "VALID"


def _conv_last(x, w, strides, dilations, pads=None):
    """Convolution of a channel-last tensor padded by ``pads`` ([begin, end] per spatial
    axis); strided + dilated runs at stride 1 and subsamples (exact; TF rejects the
    combination)."""
    tf = _tf()
    x, padding = _padding(x, pads)
    both = any(d > 1 for d in dilations) and any(s > 1 for s in strides)
    if len(strides) == 2:
        y = tf.nn.conv2d(x, w, [1, 1] if both else strides, padding, dilations=dilations)
    else:
        y = tf.nn.convolution(x, w, strides=1 if both else strides, padding=padding,
                              dilations=dilations)
    if both:
        return y[(slice(None), *[slice(None, None, s) for s in strides], slice(None))]
    return y


def _same_pads(size, kernel: int, stride: int, dilation: int):
    """The [begin, end] pads TF's SAME padding applies along one axis of ``size``
    (None where the size is not known at conversion and the stride makes it matter)."""
    eff = (kernel - 1) * dilation + 1
    if stride == 1:
        total = eff - 1
    elif size is None:
        return None
    else:
        total = max((-(-size // stride) - 1) * stride + eff - size, 0)
    return [total // 2, total - total // 2]


def _zero_taps(size, kernel: int, stride: int, pads):
    """(front, back): zero taps around a kernel of ``kernel`` taps after which TF's SAME
    padding reads what ``pads`` ([begin, end]) reads at ``stride``, or None. torch pads
    a strided convolution on both sides (3x3, stride 2, pad 1 at an even size), where
    SAME pads 0 before and 1 after; one zero tap at the end makes SAME pad 1 before,
    so every real tap reads the element torch's does and the padded copy is gone.
    A size unknown at conversion (None) needs taps that hold at every size: SAME's
    total pad depends only on the size modulo the stride, so sizes up to two strides
    past the kernel cover every case.

    >>> _zero_taps(112, 3, 2, [1, 1]), _zero_taps(None, 3, 2, [1, 1])
    ((0, 1), (0, 1))
    >>> _zero_taps(None, 2, 2, [1, 1]) is None  # an output size SAME never gives
    True
    """
    sizes = [size] if size is not None else range(1, 2 * stride + kernel + 2)
    for extra in range(stride + 1):
        for front in range(extra + 1):
            if all(_same_reads(n, kernel, stride, pads, front, extra) for n in sizes):
                return front, extra - front
    return None


def _same_reads(size: int, kernel: int, stride: int, pads, front: int, extra: int) -> bool:
    """Whether SAME on the kernel with ``front`` of ``extra`` zero taps before it reads,
    at ``size``, what ``pads`` reads with the kernel alone."""
    if (size + pads[0] + pads[1] - kernel) // stride + 1 != -(-size // stride):
        return False  # SAME's output size is ceil(size / stride)
    return _same_pads(size, kernel + extra, stride, 1)[0] - front == pads[0]


def _depthwise_last(node, x, w, strides, dilations, pads=None):
    """Depthwise convolution of channel-last ``x`` by ``w`` [kh, kw, C, mult] (numpy when
    constant)."""
    tf = _tf()
    both = any(d > 1 for d in dilations) and any(s > 1 for s in strides)
    run_strides = [1, 1] if both else strides
    # Explicit paddings on a strided DepthwiseConv2dNative abort the process in
    # TF 2.16 (a CHECK in tensor_format.h). Pads equal to what SAME pads are
    # SAME; other pads become SAME on a kernel with zero taps added where that
    # reads the same elements (on [32, 112, 112, 96], 3x3, stride 2, a Pad
    # and the VALID kernel took 3x the time of the SAME kernel with one zero
    # tap per axis); the rest stay a Pad before a VALID kernel.
    sizes = list(x.shape[1:3])
    padding = None
    if pads is None or not any(p for pair in pads for p in pair):
        padding = "VALID"
    elif all(list(p) == _same_pads(n, k, s, d) for p, n, k, s, d in
             zip(pads, sizes, w.shape[:2], run_strides, dilations, strict=True)):
        padding = "SAME"
    elif not any(d > 1 for d in dilations):
        taps = [_zero_taps(n, k, s, p) for n, k, s, p in
                zip(sizes, w.shape[:2], strides, pads, strict=True)]
        if all(t is not None for t in taps):
            padding = "SAME"
            spec = [*taps, (0, 0), (0, 0)]
            w = np.pad(w, spec) if isinstance(w, np.ndarray) else tf.pad(w, spec)
    if padding is None:
        x, padding = _padding(x, pads, explicit=False)
    w = _as_t(node, w)
    if both:
        y = tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], padding, dilations=dilations)
        return y[:, ::strides[0], ::strides[1], :]
    return tf.nn.depthwise_conv2d(x, w, [1, *strides, 1], padding, dilations=dilations)


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
    return tensor(node, w) if isinstance(w, np.ndarray) else w


def _grouped_conv(node, x_last, w_last, group: int, strides, dilations, pads=None,
                  bias=None):
    """x_last [N, s..., C], w_last [k..., C/g, M] (+ ``bias`` [M], numpy when constant)
    -> [N, s'..., M]."""
    tf = _tf()
    nd = len(strides)
    cin_g = w_last.shape[-2]
    m = w_last.shape[-1]
    if group > 1 and m % group:
        node.refuse(f"{m} output channels are not divisible by group={group}")
    if group > 1 and nd == 2 and cin_g == 1 and strides[0] == strides[1]:
        # Depthwise: TF output channel c*mult + k is ONNX output channel c*mult + k.
        mult = m // group
        if isinstance(w_last, np.ndarray):
            w_dw = w_last.reshape(*w_last.shape[:2], group, mult)
        else:
            w_dw = tf.reshape(w_last, [*w_last.shape[:2], group, mult])
        y = _depthwise_last(node, x_last, w_dw, strides, dilations, pads)
    elif group > 1 and nd == 1 and cin_g == 1 and strides == [1]:
        # 1-D depthwise (a Conformer's, a TasNet's) as the 2-D kernel on one row.
        mult = m // group
        w_dw = (w_last.reshape(1, w_last.shape[0], group, mult) if isinstance(w_last, np.ndarray)
                else tf.reshape(w_last, [1, w_last.shape[0], group, mult]))
        rows = None if pads is None else [[0, 0], *pads]
        y = tf.squeeze(_depthwise_last(node, tf.expand_dims(x_last, 1), w_dw, [1, 1],
                                       [1, *dilations], rows), 1)
    else:
        return _in_blocks(node, x_last, w_last, group, strides, dilations, pads, bias)
    return y if bias is None else tf.nn.bias_add(y, _as_t(node, bias))


def _in_blocks(node, x_last, w_last, group, strides, dilations, pads, bias):
    """The convolution as one TF convolution per block of groups (one block when
    ``group`` is 1), each with its share of the bias."""
    tf = _tf()
    if len(strides) != 2 and pads is not None and any(p for pair in pads for p in pair):
        x_last = tf.pad(x_last, [[0, 0], *[list(p) for p in pads], [0, 0]])
        pads = None  # padded once, not per part (2-D parts pad in their kernel)
    if isinstance(w_last, np.ndarray):
        merged = supergroup_size(group, w_last.shape[-2])
        w_last = block_diagonal(w_last, group, merged)
        group //= merged
    xs = tf.split(x_last, group, axis=-1) if group > 1 else [x_last]
    mg = w_last.shape[-1] // group
    outs = []
    for g in range(group):
        # One part takes the weights and bias whole (a slice of a fed tensor is an op).
        w_g, b_g = ((w_last, bias) if group == 1 else
                    (w_last[..., g * mg:(g + 1) * mg],
                     None if bias is None else bias[g * mg:(g + 1) * mg]))
        y = _conv_last(xs[g], _as_t(node, w_g), strides, dilations, pads)
        # Each part's BiasAdd right after its convolution, where the remapper fuses it.
        outs.append(y if b_g is None else tf.nn.bias_add(y, _as_t(node, b_g)))
    return tf.concat(outs, axis=-1) if group > 1 else outs[0]


# Grouped convolutions run as one TF convolution per group (TF 2.16's CPU kernel for
# groups loops over them too, and its fused form refuses them). Eigen's convolution is
# slow on narrow groups, so groups are merged into block-diagonal ones of up to 32
# input channels, at most 8 to a block (the extra multiplies by zero cost less than
# narrow kernels): on ResNeXt-50 32x4d's grouped layers at batch 32 (oneDNN off, 2
# threads), 4 channels a group: 159 ms split, 71 merged by 4, 75 by 8; 8 a group:
# 32 and 27 (by 4); 16 a group: 19 and 18 (by 2); 32 a group: 9.4 split, 13 by 2.
SUPERGROUP_CHANNELS = 32
SUPERGROUP_MAX = 8


def supergroup_size(group: int, cin_g: int) -> int:
    """How many groups go into one block-diagonal convolution: the largest divisor of
    ``group`` with at most SUPERGROUP_CHANNELS input channels and SUPERGROUP_MAX groups.

    >>> supergroup_size(32, 4), supergroup_size(32, 8), supergroup_size(32, 16)
    (8, 4, 2)
    >>> supergroup_size(32, 32), supergroup_size(6, 8), supergroup_size(7, 2)
    (1, 3, 7)
    """
    best = 1
    for s in range(1, min(group, SUPERGROUP_MAX) + 1):
        if group % s == 0 and s * cin_g <= SUPERGROUP_CHANNELS:
            best = s
    return best


def block_diagonal(w: np.ndarray, group: int, merged: int) -> np.ndarray:
    """Grouped weights [k..., C/g, M] as ``group / merged`` groups of ``merged`` each:
    [k..., merged * C/g, M], each block's own groups on its diagonal, zeros elsewhere."""
    if merged == 1:
        return w
    cin_g, m = w.shape[-2], w.shape[-1]
    mg = m // group
    out = np.zeros((*w.shape[:-2], merged * cin_g, m), w.dtype)
    for g in range(group):
        j = g % merged
        out[..., j * cin_g:(j + 1) * cin_g, g * mg:(g + 1) * mg] = w[..., g * mg:(g + 1) * mg]
    return out


def _add_bias_last(node, y, i: int):
    if not node.has(i):
        return y
    tf = _tf()
    return tf.nn.bias_add(y, tf.cast(node.t(i), y.dtype))


def _conv_setup(node, what: str):
    """Conv and ConvTranspose's shared reading: rank, spatial dims, weight shape, kernel,
    strides, dilations and group, each checked against the weights."""
    float_input(node)
    rank = node.rank(0)
    nd = rank - 2
    if nd < 1 or nd > 3:
        node.refuse(f"{nd}-D {what} is not supported", "use 1-D, 2-D or 3-D")
    wshape = node.shape(1)
    kernel = list(node.attr("kernel_shape") or wshape[2:])
    if kernel != list(wshape[2:]):
        node.refuse(f"kernel_shape {kernel} differs from the weights' {wshape[2:]}")
    strides = attr_list(node, "strides", nd, 1)
    dilations = attr_list(node, "dilations", nd, 1)
    return rank, nd, wshape, kernel, strides, dilations, int(node.attr("group"))


@op("Conv", attrs={"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                   "pads": None, "strides": None}, check=check_auto_pad)
def conv(node):
    tf = _tf()
    rank, nd, wshape, kernel, strides, dilations, group = _conv_setup(node, "convolution")
    cin = node.shape(0)[1]
    if cin is not None and cin != wshape[1] * group:
        node.refuse(f"input channels {cin} != weights' {wshape[1]} x group {group}")
    begin, end, _ = window_pads(node, kernel, strides, dilations)
    x = last_input(node, 0)
    w = _weights_last(node, 1)
    if not isinstance(w, np.ndarray):
        w = tf.cast(w, x.dtype)
    else:
        w = w.astype(x.dtype.as_numpy_dtype)
    pads = [[b, e] for b, e in zip(begin, end, strict=True)]
    bias = node.value(2)
    if bias is not None:
        bias = (bias.astype(x.dtype.as_numpy_dtype) if isinstance(bias, np.ndarray)
                else tf.cast(bias, x.dtype))
    y = _grouped_conv(node, x, w, group, strides, dilations, pads, bias)
    return emit_last(node, y)


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
                            "pads": None, "strides": None}, check=check_auto_pad)
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
        ins = spatial(node, 0, "spatial dimensions with output_shape or auto_pad SAME")
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
    x = last_input(node, 0)
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
            wg = tensor(node, wg)
        else:
            wg = tf.cast(w[g * cg:(g + 1) * cg], x.dtype)
            wg = tf.transpose(tf.reverse(wg, list(range(2, rank))), [*range(2, rank), 0, 1])
        outs.append(_conv_last(xs[g], wg, [1] * nd, dilations))
    y = outs[0] if group == 1 else tf.concat(outs, -1)
    y = _add_bias_last(node, y, 2)
    return emit_last(node, y)


@op("DeformConv", attrs={"dilations": None, "group": 1, "kernel_shape": None,
                         "offset_group": 1, "pads": None, "strides": None},
    check=lambda info: "DeformConv is not implemented")
def deform_conv(node):
    node.refuse("DeformConv is not implemented", "replace deformable convolution")
