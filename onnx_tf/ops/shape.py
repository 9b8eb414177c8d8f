"""ONNX shape ops (see onnx_tf/core.py for the handler contract): constants, Shape, Reshape,
Transpose, Squeeze/Unsqueeze, Concat, Split, Slice. Shapes only known at run time are
built from ``tf.shape``, so dynamic dimensions are never frozen; shape arithmetic over
constants is folded in numpy where the result is needed as a Python value.

A shape vector read from a partly static input (a dynamic batch) keeps what is known
at conversion (shape_util.known_values): a Gather, Slice or Concat of its static
entries is a constant, and a Reshape whose one unknown entry is a dimension gets a
constant target with -1 there. The served graph then computes no Shape/Gather/Concat
chain per request where the sizes are known.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.core import is_const
from tfx_bridge.onnx_tf.layout import channel_last, inverse, merged_transpose
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.shape_util import known_values
from tfx_bridge.onnx_tf.ops.tensor_util import FIX_CONST, _axis, _dims, _prod, i64, vec
from tfx_bridge.onnx_tf.registry import REQUIRED, op

# --------------------------------------------------------------------------- constants


@op("Constant", attrs={"value": None, "value_float": None, "value_floats": None,
                       "value_int": None, "value_ints": None, "sparse_value": None,
                       "value_string": None, "value_strings": None},
    check=lambda info: ("a sparse or string constant is not supported"
                        if any(info.attrs.get(k) is not None for k in
                               ("sparse_value", "value_string", "value_strings")) else None))
def constant(node):
    from onnx import numpy_helper
    a = node.attrs
    if a.get("value") is not None:
        return numpy_helper.to_array(a["value"]).copy()
    if a.get("value_float") is not None:
        return np.array(a["value_float"], np.float32)
    if a.get("value_floats") is not None:
        return np.array(a["value_floats"], np.float32)
    if a.get("value_int") is not None:
        return np.array(a["value_int"], np.int64)
    if a.get("value_ints") is not None:
        return np.array(a["value_ints"], np.int64)
    node.refuse("a Constant with no value")


@op("Identity")
def identity(node):
    return node.value(0)


# --------------------------------------------------------------------------- shapes


@op("Shape", attrs={"start": 0, "end": None})
def shape(node):
    start, end = node.attr("start"), node.attr("end")
    dims = node.dyn_shape(0)
    if int(start) == 0 and end is None:
        return dims  # tf.shape itself, which known_values reads back to its static dims
    # Python slicing clamps start/end exactly as ONNX specifies.
    return dims[slice(int(start), None if end is None else int(end))]


@op("Size")
def size(node):
    dims = _dims(node, 0)
    total = _prod(dims)
    if isinstance(total, int):
        return np.array(total, np.int64)
    return _tf().size(node.t(0), out_type=_tf().int64)


@op("Reshape", attrs={"allowzero": 0}, since=5)
def reshape(node):
    tf = _tf()
    target = node.maybe_const(1)
    allowzero = int(node.attr("allowzero"))
    if target is not None:
        target = [int(v) for v in target.reshape(-1)]
        if allowzero and 0 in target and -1 in target:
            node.refuse("allowzero=1 with both 0 and -1 in the shape (invalid in ONNX)")
        if not allowzero and 0 in target:
            dims = _dims(node, 0)
            if any(v == 0 and j >= len(dims) for j, v in enumerate(target)):
                node.refuse("a 0 in the shape beyond the input's rank")
            target = [dims[j] if v == 0 else v for j, v in enumerate(target)]
        return tf.reshape(node.t(0), vec(target))
    folded = _known_target(node, allowzero)
    if folded is not None:
        return tf.reshape(node.t(0), folded)
    target = tf.cast(node.t(1), tf.int64)
    length = target.shape[0]
    if length is None:
        node.refuse("a run-time shape of unknown length", FIX_CONST)
    if not allowzero:
        dims = _dims(node, 0)
        padded = vec((dims + [1] * length)[:length])
        target = tf.where(tf.equal(target, 0), padded, target)
    return tf.reshape(node.t(0), target)


def _known_target(node, allowzero: int) -> Optional[np.ndarray]:
    """A run-time Reshape target as a constant, when at most one of its entries is not
    known at conversion (that one becomes -1: the size the other entries leave)."""
    known = known_values(node.value(1))
    if known is None:
        return None
    if not allowzero:
        static = node.shape(0)
        known = [(static[j] if j < len(static) else -2) if v == 0 else v
                 for j, v in enumerate(known)]
    if any(v is not None and v < -1 for v in known):
        return None  # a 0 beyond the input's rank, or an invalid entry: the checked path
    if sum(v is None or v == -1 for v in known) > 1:
        return None
    return np.array([-1 if v is None else v for v in known], np.int64)


@op("Flatten", attrs={"axis": 1})
def flatten(node):
    static = node.shape(0)
    axis = int(node.attr("axis"))
    rank = len(static)
    if not -rank <= axis <= rank:
        node.refuse(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    parts = [static[:axis], static[axis:]]
    # A constant target, the unknown side -1 (a -1 is ambiguous beside a 0-sized axis:
    # TF would take it as 1).
    if sum(None in p for p in parts) == 1 and 0 not in static:
        target = vec([-1 if None in p else _prod(p) for p in parts])
    else:
        dims = _dims(node, 0)
        target = vec([_prod(dims[:axis]), _prod(dims[axis:])])
    return _tf().reshape(node.t(0), target)


@op("Transpose", attrs={"perm": None})
def transpose(node):
    rank = node.rank(0)
    perm = node.attr("perm")
    perm = list(range(rank))[::-1] if perm is None else [_axis(node, p, rank, "perm")
                                                          for p in perm]
    if perm == list(range(rank)):  # no op: what a held tensor's free transpose leaves
        return node.t(0)
    held = inverse(perm)
    if rank >= 3 and tuple(held) == channel_last(rank):
        # Into NC<spatial> from channel-last data (ConvNeXt's permute back): the input
        # is that value held channel-last, which a convolution after it takes as is.
        return node.emit(node.t(0), held)
    return merged_transpose(node.t(0), perm)


def _axes_arg(node):
    """Axes from the attribute (opset < 13) or the optional input 1 (opset >= 13): a list
    of ints, None when absent, or an int64 tensor when only known at run time."""
    if node.opset < 13:
        axes = node.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    if not node.has(1):
        return None
    axes = node.maybe_const(1)
    if axes is not None:
        return [int(a) for a in axes.reshape(-1)]
    return _tf().reshape(_tf().cast(node.t(1), _tf().int64), [-1])


def runtime_axes(node, axes, rank: int):
    """Run-time axes: non-negative, with their (static) count; refused if unknown."""
    tf = _tf()
    count = axes.shape[0]
    if count is None:
        node.refuse("run-time axes of unknown length", FIX_CONST)
    axes = tf.where(axes < 0, axes + rank, axes)
    tf.debugging.assert_equal(tf.size(tf.unique(axes)[0]), count,
                              message="repeated axes")
    return axes, count


@op("Squeeze", attrs={"axes": None})
def squeeze(node):
    tf = _tf()
    static = node.shape(0)
    rank = len(static)
    axes = _axes_arg(node)
    x = node.t(0)
    if axes is not None and not isinstance(axes, list):
        # Run-time axes: keep the other dims; squeezed dims must be 1 (checked).
        axes, count = runtime_axes(node, axes, rank)
        dims = tf.shape(x, out_type=tf.int64)
        tf.debugging.assert_equal(tf.gather(dims, axes), tf.constant(1, tf.int64),
                                  message="Squeeze of a dimension that is not 1")
        keep = tf.logical_not(tf.reduce_any(tf.equal(tf.range(rank, dtype=tf.int64)[:, None],
                                                     axes[None, :]), axis=1))
        out = tf.reshape(x, tf.boolean_mask(dims, keep))
        out.set_shape([None] * (rank - count))
        return out
    if not axes:
        if any(d is None for d in static):
            node.refuse("Squeeze without axes on an input with run-time dims",
                        "give the axes to squeeze explicitly")
        axes = [j for j, d in enumerate(static) if d == 1]
    axes = sorted({_axis(node, a, rank) for a in axes})
    for a in axes:
        if static[a] is not None and static[a] != 1:
            node.refuse(f"squeezing axis {a} of size {static[a]}")
    if not axes:
        return tf.identity(x)
    return tf.squeeze(x, axes)


@op("Unsqueeze", attrs={"axes": None})
def unsqueeze(node):
    tf = _tf()
    axes = _axes_arg(node)
    if axes is None:
        node.refuse("Unsqueeze without axes")
    x = node.t(0)
    if not isinstance(axes, list):
        # Run-time axes: the output's rank is static; its dims are placed at run time.
        count = axes.shape[0]
        if count is None:
            node.refuse("run-time axes of unknown length", FIX_CONST)
        rank = node.rank(0) + count
        axes, _ = runtime_axes(node, axes, rank)
        is_new = tf.reduce_any(tf.equal(tf.range(rank, dtype=tf.int64)[:, None],
                                        axes[None, :]), axis=1)
        # Position j takes input dim (number of old dims before j), or 1 where new.
        source = tf.cumsum(tf.cast(tf.logical_not(is_new), tf.int64), exclusive=True)
        dims = tf.concat([tf.shape(x, out_type=tf.int64), [np.int64(1)]], 0)
        source = tf.where(is_new, tf.cast(node.rank(0), tf.int64), source)
        out = tf.reshape(x, tf.gather(dims, source))
        out.set_shape([None] * rank)
        return out
    rank = node.rank(0) + len(axes)
    axes = sorted(_axis(node, a, rank) for a in axes)
    if len(set(axes)) != len(axes):
        node.refuse("repeated axes")
    for a in axes:  # ascending: each axis is already in output numbering
        x = tf.expand_dims(x, a)
    return x


@op("Concat", attrs={"axis": REQUIRED}, since=4)
def concat(node):
    rank = node.rank(0)
    axis = _axis(node, node.attr("axis"), rank)
    values = [node.value(i) for i in range(node.n) if node.has(i)]
    if all(is_const(v) for v in values):
        return np.concatenate(values, axis=axis)
    if rank == 1:  # a shape vector: constant when its parts are known at conversion
        parts = [known_values(v) for v in values]
        if all(p is not None and None not in p for p in parts):
            dtype = np.asarray(values[0]).dtype if is_const(values[0]) else \
                values[0].dtype.as_numpy_dtype
            return np.array([v for p in parts for v in p], dtype)
    return _tf().concat(node.ts(), axis=axis)


@op("Split", attrs={"axis": 0, "split": None, "num_outputs": None}, since=2)
def split(node):
    tf = _tf()
    dims = _dims(node, 0)
    axis = _axis(node, node.attr("axis"), len(dims))
    count = len(node.proto.output)
    if node.opset < 13:
        sizes = node.attr("split")
    else:
        sizes = node.maybe_const(1) if node.has(1) else None
        if node.has(1) and sizes is None:  # run-time sizes: their count is the outputs'
            return list(tf.split(node.t(0), tf.reshape(tf.cast(node.t(1), tf.int64), [count]),
                                 axis=axis, num=count))
    dim = dims[axis]
    x = node.t(0)
    if sizes is not None:
        sizes = [int(s) for s in sizes]
        if len(sizes) != count:
            node.refuse(f"{len(sizes)} split sizes for {count} outputs")
        if isinstance(dim, int) and sum(sizes) != dim:
            node.refuse(f"split sizes {sizes} do not add up to the dimension ({dim})")
        return list(tf.split(x, sizes, axis=axis))
    num = node.attr("num_outputs")
    if num is not None:
        num = int(num)
        if num != count:
            node.refuse(f"num_outputs={num} with {count} outputs")
        # Chunks of ceil(dim / n), the last one smaller.
        if isinstance(dim, int):
            chunk = -(-dim // num)
            sizes = [chunk] * (num - 1) + [dim - chunk * (num - 1)]
            if sizes[-1] < 0:
                node.refuse(f"num_outputs={num} is too many for a dimension of {dim}")
            return list(tf.split(x, sizes, axis=axis))
        chunk = (dim + num - 1) // num
        sizes = tf.stack([chunk] * (num - 1) + [dim - chunk * (num - 1)])
        return list(tf.split(x, sizes, axis=axis, num=num))
    if isinstance(dim, int) and dim % count:
        node.refuse(f"a dimension of {dim} does not split into {count} equal parts")
    return list(tf.split(x, count, axis=axis))


@op("Slice", attrs={"starts": None, "ends": None, "axes": None})
def slice_(node):
    tf = _tf()
    rank = node.rank(0)
    if node.opset < 10:
        if node.attr("starts") is None or node.attr("ends") is None:
            node.refuse("Slice without starts/ends")
        starts = np.array(node.attr("starts"), np.int64)
        ends = np.array(node.attr("ends"), np.int64)
        axes = node.attr("axes")
        steps = np.ones_like(starts)
    else:
        starts, ends = i64(node.value(1)), i64(node.value(2))
        axes = node.maybe_const(3) if node.has(3) else None
        if node.has(3) and axes is None:
            return _slice_runtime_axes(node, starts, ends)
        axes = None if axes is None else [int(a) for a in axes.reshape(-1)]
        steps = node.maybe_const(4) if node.has(4) else None
        if node.has(4) and steps is None:
            steps = i64(node.value(4))
        elif steps is None:
            steps = np.ones(len(axes) if axes is not None else starts.shape[0], np.int64)
        else:
            steps = steps.astype(np.int64).reshape(-1)
    count = starts.shape[0]
    if count is None:
        node.refuse("run-time starts of unknown length", FIX_CONST)
    axes = list(range(count)) if axes is None else [_axis(node, a, rank) for a in axes]
    if len(axes) != count or len(set(axes)) != count:
        node.refuse("axes do not match starts or repeat an axis")
    if is_const(steps) and np.any(steps == 0):
        node.refuse("a step of 0")
    mask = sum(1 << j for j in range(rank) if j not in axes)
    position = [axes.index(j) if j in axes else count for j in range(rank)]

    def full(values, fill: int):
        # Per-axis vector of length rank: values at the sliced axes, ``fill`` elsewhere.
        if is_const(values):
            return np.append(values.reshape(-1), np.int64(fill))[position]
        return tf.gather(tf.concat([tf.reshape(values, [-1]), [np.int64(fill)]], 0), position)

    if rank == 1 and all(is_const(v) for v in (starts, ends, steps)):
        known = known_values(node.value(0))
        if known is not None:  # a shape vector: Python slicing clamps as ONNX does
            picked = known[int(starts[0]):int(ends[0]):int(steps[0])]
            if None not in picked:
                return np.array(picked, node.dtype(0).as_numpy_dtype)
    # strided_slice canonicalizes (negative -> + dim, clamping by step sign) as ONNX does.
    return tf.strided_slice(node.t(0), full(starts, 0), full(ends, 0), full(steps, 1),
                            begin_mask=mask, end_mask=mask)


def _slice_runtime_axes(node, starts, ends):
    """Slice whose axes are known only at run time: full-rank begin/end/strides by scatter."""
    tf = _tf()
    rank = node.rank(0)
    axes, count = runtime_axes(node, tf.reshape(tf.cast(node.t(3), tf.int64), [-1]), rank)
    steps = i64(node.value(4)) if node.has(4) else np.ones(count, np.int64)
    where = axes[:, None]

    def full(values, base: int):
        return tf.tensor_scatter_nd_update(tf.fill([rank], np.int64(base)), where,
                                           tf.reshape(tf.cast(values, tf.int64), [count]))

    int64_max = np.iinfo(np.int64).max
    return tf.strided_slice(node.t(0), full(starts, 0), full(ends, int64_max), full(steps, 1))
