"""ONNX index-producing and rearranging ops (see onnx_tf/core.py for the handler contract): TopK,
ArgMax/ArgMin, CumSum, Trilu, OneHot, NonZero, EyeLike, DepthToSpace/SpaceToDepth,
Compress, ReverseSequence, Unique.
"""
from __future__ import annotations

import numpy as np

from tfx_bridge.onnx_tf.dtypes import tf_dtype
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.tensor_util import _axis, _dims, _prod, vec
from tfx_bridge.onnx_tf.registry import REQUIRED, op

# --------------------------------------------------------------------------- index ops


def _sort_key_desc(node, x, largest: bool):
    """Values whose descending order is ``x``'s (largest) or ascending order (smallest)."""
    tf = _tf()
    if x.dtype.is_floating:
        return x if largest else -x
    if x.dtype == tf.bool:
        x = tf.cast(x, tf.int32)
    if x.dtype == tf.uint64:
        node.refuse("uint64 values", "use int64")
    x = tf.cast(x, tf.int64)
    return x if largest else tf.bitwise.invert(x)  # ~x = -x - 1 reverses order, no overflow


@op("TopK", attrs={"axis": -1, "largest": 1, "sorted": 1, "k": None})
def top_k(node):
    tf = _tf()
    rank = node.rank(0)
    axis = _axis(node, node.attr("axis"), rank)
    if node.opset < 10:
        if node.attr("k") is None:
            node.refuse("TopK without k")
        k = int(node.attr("k"))
    else:
        k = node.maybe_const(1)
        k = int(k.reshape(-1)[0]) if k is not None else tf.reshape(tf.cast(node.t(1),
                                                                           tf.int32), [])
    x = node.t(0)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = tf.transpose(x, perm) if axis != rank - 1 else x
    # top_k is stable: among equal keys the lower index comes first, as ONNX requires.
    _, idx = tf.math.top_k(_sort_key_desc(node, moved, bool(node.attr("largest"))), k=k,
                           sorted=True)
    values = tf.gather(moved, idx, batch_dims=rank - 1)
    idx = tf.cast(idx, tf.int64)
    if axis != rank - 1:
        values, idx = tf.transpose(values, perm), tf.transpose(idx, perm)
    return [values, idx]


def _arg(node, largest: bool):
    tf = _tf()
    dims = _dims(node, 0)
    axis = _axis(node, node.attr("axis"), len(dims))
    x = node.t(0)
    if x.dtype == tf.bool:
        x = tf.cast(x, tf.int32)
    last = bool(node.attr("select_last_index"))
    if last:
        x = tf.reverse(x, [axis])
    fn = tf.math.argmax if largest else tf.math.argmin
    idx = fn(x, axis=axis, output_type=tf.int64)  # first occurrence on ties
    if last:
        idx = tf.cast(dims[axis], tf.int64) - 1 - idx
    if node.attr("keepdims"):
        idx = tf.expand_dims(idx, axis)
    return idx


ARG_ATTRS = {"axis": 0, "keepdims": 1, "select_last_index": 0}


@op("ArgMax", attrs=ARG_ATTRS)
def arg_max(node):
    return _arg(node, True)


@op("ArgMin", attrs=ARG_ATTRS)
def arg_min(node):
    return _arg(node, False)


@op("CumSum", attrs={"exclusive": 0, "reverse": 0}, since=11)
def cum_sum(node):
    tf = _tf()
    rank = node.rank(0)
    axis = node.maybe_const(1)
    axis = _axis(node, int(axis.reshape(-1)[0]), rank) if axis is not None else \
        tf.reshape(node.t(1), [])
    x = node.t(0)
    dtype = x.dtype
    if dtype in (tf.uint32, tf.uint64):  # no CPU kernel; int64 wraps alike for uint32
        if dtype == tf.uint64:
            node.refuse("CumSum on uint64", "use int64")
        x = tf.cast(x, tf.int64)
    out = tf.math.cumsum(x, axis=axis, exclusive=bool(node.attr("exclusive")),
                         reverse=bool(node.attr("reverse")))
    return tf.cast(out, dtype)


@op("Trilu", attrs={"upper": 1}, since=14)
def trilu(node):
    tf = _tf()
    dims = _dims(node, 0)
    if len(dims) < 2:
        node.refuse("Trilu on a tensor of rank < 2")
    k = tf.reshape(tf.cast(node.t(1), tf.int64), []) if node.has(1) else np.int64(0)
    rows = tf.range(tf.cast(dims[-2], tf.int64))[:, None]
    cols = tf.range(tf.cast(dims[-1], tf.int64))[None, :]
    keep = cols - rows >= k if node.attr("upper") else cols - rows <= k
    x = node.t(0)
    return tf.where(keep, x, tf.zeros_like(x))


@op("OneHot", attrs={"axis": -1}, since=9)
def one_hot(node):
    tf = _tf()
    rank = node.rank(0) + 1
    axis = _axis(node, node.attr("axis"), rank)
    depth = tf.cast(tf.reshape(node.t(1), []), tf.int64)
    indices = tf.cast(node.t(0), tf.int64)  # float indices truncate, as ONNX casts
    indices = tf.where(indices < 0, indices + depth, indices)
    values = node.t(2)
    return tf.one_hot(indices, tf.cast(depth, tf.int32), on_value=values[1],
                      off_value=values[0], axis=axis, dtype=values.dtype)


@op("NonZero", since=9)
def non_zero(node):
    tf = _tf()
    x = node.t(0)
    if node.rank(0) == 0:
        node.refuse("NonZero on a scalar")
    mask = x if x.dtype == tf.bool else tf.not_equal(x, tf.zeros([], x.dtype))
    return tf.transpose(tf.where(mask))  # row-major order, like numpy.nonzero


@op("EyeLike", attrs={"dtype": None, "k": 0}, since=9)
def eye_like(node):
    tf = _tf()
    dims = _dims(node, 0)
    if len(dims) != 2:
        node.refuse("EyeLike on a tensor that is not 2-D")
    dtype = node.dtype(0) if node.attr("dtype") is None else tf_dtype(int(node.attr("dtype")))
    rows = tf.range(tf.cast(dims[0], tf.int64))[:, None]
    cols = tf.range(tf.cast(dims[1], tf.int64))[None, :]
    return tf.cast(tf.equal(cols - rows, int(node.attr("k"))), dtype)


def _nchw_and_block(node):
    """The 4-D input's dimensions (N, C, H, W) and the ``blocksize``; refused if not 4-D."""
    dims = _dims(node, 0)
    if len(dims) != 4:
        node.refuse(f"{node.op_type} on a tensor that is not 4-D (NCHW)")
    return (*dims, int(node.attr("blocksize")))


@op("DepthToSpace", attrs={"blocksize": REQUIRED, "mode": "DCR"},
    check=lambda info: None if info.attrs.get("mode", "DCR") in ("DCR", "CRD") else
    f"mode={info.attrs.get('mode')!r} is not supported (DCR or CRD)")
def depth_to_space(node):
    tf = _tf()
    n, c, h, w, b = _nchw_and_block(node)
    if node.attr("mode") == "DCR":
        x = tf.reshape(node.t(0), vec([n, b, b, c // b // b, h, w]))
        x = tf.transpose(x, [0, 3, 4, 1, 5, 2])
    else:
        x = tf.reshape(node.t(0), vec([n, c // b // b, b, b, h, w]))
        x = tf.transpose(x, [0, 1, 4, 2, 5, 3])
    return tf.reshape(x, vec([n, c // b // b, h * b, w * b]))


@op("SpaceToDepth", attrs={"blocksize": REQUIRED})
def space_to_depth(node):
    tf = _tf()
    n, c, h, w, b = _nchw_and_block(node)
    x = tf.reshape(node.t(0), vec([n, c, h // b, b, w // b, b]))
    x = tf.transpose(x, [0, 3, 5, 1, 2, 4])
    return tf.reshape(x, vec([n, c * b * b, h // b, w // b]))


@op("Compress", attrs={"axis": None}, since=9)
def compress(node):
    tf = _tf()
    x = node.t(0)
    axis = node.attr("axis")
    if axis is None:
        x, axis = tf.reshape(x, [-1]), 0
    else:
        axis = _axis(node, axis, node.rank(0))
    # A condition shorter than the axis selects only among its length; a true entry
    # beyond the axis fails at run time (gather bounds check).
    idx = tf.where(tf.cast(node.t(1), tf.bool))[:, 0]
    return tf.gather(x, idx, axis=axis)


@op("ReverseSequence", attrs={"batch_axis": 1, "time_axis": 0}, since=10)
def reverse_sequence(node):
    tf = _tf()
    rank = node.rank(0)
    return tf.reverse_sequence(node.t(0), tf.cast(node.t(1), tf.int64),
                               seq_axis=_axis(node, node.attr("time_axis"), rank),
                               batch_axis=_axis(node, node.attr("batch_axis"), rank))


def _argsort_rows(node, rows):
    """Stable lexicographic ascending order of the rows of a 2-D tensor (static width)."""
    tf = _tf()
    width = rows.shape[1]
    if width is None:
        node.refuse("Unique with axis over slices of run-time size")
    count = tf.shape(rows)[0]
    order = tf.range(count)
    for col in reversed(range(width)):  # least significant column first, stable passes
        key = _sort_key_desc(node, tf.gather(rows[:, col], order), False)
        _, perm = tf.math.top_k(key, k=count, sorted=True)
        order = tf.gather(order, perm)
    return order


@op("Unique", attrs={"axis": None, "sorted": 1}, since=11)
def unique(node):
    tf = _tf()
    x = node.t(0)
    axis = node.attr("axis")
    if axis is None:
        flat = tf.reshape(x, [-1])
        y, inverse, counts = tf.unique_with_counts(flat, out_idx=tf.int64)
        rows = None
    else:
        axis = _axis(node, axis, node.rank(0))
        moved = tf.experimental.numpy.moveaxis(x, axis, 0) if axis else x
        dims = _dims(node, 0)
        rest = _prod(dims[:axis] + dims[axis + 1:])
        rows = tf.reshape(moved, vec([dims[axis], rest]))
        y_rows, inverse, counts = _unique_rows(node, rows)
        y = y_rows
    count = tf.shape(counts, out_type=tf.int64)[0]
    n = tf.shape(inverse, out_type=tf.int64)[0]
    first = tf.math.unsorted_segment_min(tf.range(n), inverse, count)  # first occurrence
    if node.attr("sorted"):
        if rows is None:
            order = _argsort_rows(node, tf.reshape(y, [-1, 1]))
        else:
            order = _argsort_rows(node, y_rows)
        rank_of = tf.math.invert_permutation(tf.cast(order, tf.int32))
        y = tf.gather(y, order)
        first = tf.gather(first, order)
        counts = tf.gather(counts, order)
        inverse = tf.gather(tf.cast(rank_of, tf.int64), inverse)
    if rows is not None:
        shape_ = tf.concat([[tf.shape(y)[0]], tf.shape(moved)[1:]], 0)
        y = tf.reshape(y, shape_)
        if axis:
            y = tf.experimental.numpy.moveaxis(y, 0, axis)
    return [y, tf.cast(first, tf.int64), inverse, tf.cast(counts, tf.int64)]


def _unique_rows(node, rows):
    """Unique rows of a 2-D tensor in first-occurrence order: (rows, inverse, counts)."""
    tf = _tf()
    y, inverse, counts = tf.raw_ops.UniqueWithCountsV2(x=rows, axis=[0], out_idx=tf.int64)
    y.set_shape([None, rows.shape[1]])
    return y, inverse, counts
