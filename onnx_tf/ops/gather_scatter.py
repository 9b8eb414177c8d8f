"""ONNX gather and scatter ops (see onnx_tf/core.py for the handler contract).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.core import is_const
from tfx_bridge.onnx_tf.layout import Permuted
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.shape_util import known_values
from tfx_bridge.onnx_tf.ops.tensor_util import (
    INT_TYPES,
    _axis,
    _dims,
    _grid,
    normalize_indices,
    vec,
)
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- gather/scatter


@op("Gather", attrs={"axis": 0})
def gather(node):
    tf = _tf()
    dims = _dims(node, 0)
    axis = _axis(node, node.attr("axis"), len(dims))
    indices = normalize_indices(node.value(1), dims[axis])
    if len(dims) == 1 and is_const(indices) and isinstance(dims[0], int):
        # Entries of a shape vector known at conversion are constants, not a per-request
        # Shape -> Gather chain.
        known = known_values(node.value(0))
        if known is not None and np.all((indices >= 0) & (indices < dims[0])):
            picked = [known[int(i)] for i in indices.reshape(-1)]
            if None not in picked:
                return np.array(picked, node.dtype(0).as_numpy_dtype).reshape(indices.shape)
    return tf.gather(node.t(0), indices, axis=axis)


def _expanded_from(node, i: int):
    """The value an ONNX Expand broadcast into input ``i``, or None. The Expand's own
    input is looked up in the graph that ran it: a subgraph's input may shadow it."""
    if i >= len(node.proto.input):
        return None
    proto, run = node.graph.producer(node.proto.input[i])
    if proto is None or proto.op_type != "Expand" or proto.domain not in ("", "ai.onnx"):
        return None
    try:
        source = run.lookup(proto.input[0])
    except KeyError:
        return None
    return None if isinstance(source, Permuted) else source


def _slice_coords(node, dims, axis: int):
    """Coordinates of whole trailing slices, [*indices.shape[:axis + 1], axis + 1], when
    the indices are an Expand of values that do not vary after ``axis`` and span the
    data there (torch's ``index.view(-1, 1, 1).expand_as(src)`` before a gather or
    scatter on dim 0); None otherwise. One coordinate per slice instead of one per
    element: the full form built (and TF's scatter read) a rank-wide index for every
    element."""
    source = _expanded_from(node, 1)
    if source is None or axis == len(dims) - 1:
        return None
    index_dims = node.shape(1)
    updates = node.shape(2) if node.op_type != "GatherElements" else None
    if updates is not None and len(updates) == len(index_dims):  # ONNX: the same shape
        index_dims = [d if d is not None else u
                      for d, u in zip(index_dims, updates, strict=True)]
    if not is_const(source) and source.shape.rank is None:
        return None
    shape = list(np.shape(source)) if is_const(source) else source.shape.as_list()
    if len(index_dims) != len(dims) or len(shape) > len(dims):
        return None
    trailing = len(dims) - axis - 1
    aligned = [1] * (len(dims) - len(shape)) + shape  # Expand aligns on the right
    for j in range(axis + 1, len(dims)):
        if aligned[j] != 1 or not isinstance(dims[j], int) or index_dims[j] != dims[j]:
            return None
    tf = _tf()
    values = node.graph.converter.tensor(source, node.folding) if is_const(source) \
        else source
    if len(shape) > trailing:
        values = tf.squeeze(values, list(range(len(shape) - trailing, len(shape))))
    else:
        values = tf.reshape(values, [])
    prefix = _dims(node, 1)[:axis + 1]
    values = tf.broadcast_to(values, vec(prefix))  # the Expand's own right alignment
    return _grid(prefix, normalize_indices(values, dims[axis]), axis)


def _element_coords(node):
    """Coordinates along ``axis`` of the data (input 0) for every element of the
    indices (input 1), or of every whole trailing slice where the indices are
    broadcast there: the form gather_nd / scatter_nd take for *Elements ops."""
    dims = _dims(node, 0)
    axis = _axis(node, node.attr("axis"), len(dims))
    coords = _slice_coords(node, dims, axis)
    if coords is not None:
        return coords
    indices = normalize_indices(node.value(1), dims[axis])
    return _grid(_dims(node, 1), indices, axis)


@op("GatherElements", attrs={"axis": 0}, since=11)
def gather_elements(node):
    return _tf().gather_nd(node.t(0), _element_coords(node))


@op("GatherND", attrs={"batch_dims": 0}, since=11)
def gather_nd(node):
    tf = _tf()
    batch = int(node.attr("batch_dims"))
    dims = _dims(node, 0)
    depth = node.shape(1)[-1]
    if depth is None:
        node.refuse("indices with a run-time last dimension")
    indices = tf.convert_to_tensor(node.t(1))
    bound = tf.cast(vec(dims[batch:batch + depth]), indices.dtype)
    indices = tf.where(indices < 0, indices + bound, indices)
    return tf.gather_nd(node.t(0), indices, batch_dims=batch)


REDUCTIONS = ("none", "add", "mul", "max", "min")


def _check_reduction(info) -> Optional[str]:
    reduction = info.attrs.get("reduction", "none")
    if reduction not in REDUCTIONS:
        return f"reduction={reduction!r} is not supported (one of {', '.join(REDUCTIONS)})"
    return None


def _scatter_nd(node, data, indices, updates, reduction: str):
    """ONNX ScatterND (reduction none/add/mul/max/min) with non-negative indices."""
    tf = _tf()
    dtype = data.dtype
    if reduction != "none" and dtype == tf.bool:
        node.refuse(f"reduction={reduction} on bool tensors", "cast to an integer type")
    # TF's CPU scatter kernels lack the small integer types; int64 is exact (wraps alike).
    wide = tf.int64 if dtype.name in INT_TYPES and dtype.name not in ("int32", "int64") \
        else None
    if wide is not None:
        if dtype == tf.uint64:
            node.refuse("scatter on uint64", "use int64")
        data, updates = tf.cast(data, wide), tf.cast(updates, wide)
    if reduction == "none":
        out = tf.tensor_scatter_nd_update(data, indices, updates)
    elif reduction == "add":
        out = tf.tensor_scatter_nd_add(data, indices, updates)
    elif reduction == "max":
        out = tf.tensor_scatter_nd_max(data, indices, updates)
    elif reduction == "min":
        out = tf.tensor_scatter_nd_min(data, indices, updates)
    else:  # mul: multiply the product of the updates into each addressed slice
        shape = tf.shape(data, out_type=tf.int64)
        depth = indices.shape[-1]
        lead = shape[:depth]
        strides = tf.math.cumprod(lead, reverse=True, exclusive=True)
        flat_idx = tf.reduce_sum(tf.reshape(indices, [-1, depth]) * strides, axis=-1)
        rows = tf.reduce_prod(lead)
        flat_data = tf.reshape(data, tf.concat([[rows], shape[depth:]], 0))
        flat_upd = tf.reshape(updates, tf.concat([[-1], shape[depth:]], 0))
        product = tf.math.unsorted_segment_prod(flat_upd, flat_idx, rows)
        out = tf.reshape(flat_data * product, shape)
    return tf.cast(out, dtype) if wide is not None else out


def _scatter_elements(node):
    tf = _tf()
    return _scatter_nd(node, tf.convert_to_tensor(node.t(0)), _element_coords(node),
                       tf.convert_to_tensor(node.t(2)), node.attr("reduction", "none"))


@op("ScatterElements", attrs={"axis": 0, "reduction": "none"}, check=_check_reduction,
    since=11)
def scatter_elements(node):
    return _scatter_elements(node)


@op("Scatter", attrs={"axis": 0}, since=9)
def scatter(node):
    return _scatter_elements(node)


@op("ScatterND", attrs={"reduction": "none"}, check=_check_reduction, since=11)
def scatter_nd(node):
    tf = _tf()
    depth = node.shape(1)[-1]
    if depth is None:
        node.refuse("indices with a run-time last dimension")
    indices = tf.cast(node.t(1), tf.int64)
    bound = vec(_dims(node, 0)[:depth])
    indices = tf.where(indices < 0, indices + bound, indices)
    return _scatter_nd(node, tf.convert_to_tensor(node.t(0)), indices,
                       tf.convert_to_tensor(node.t(2)), node.attr("reduction"))
