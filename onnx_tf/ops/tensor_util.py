"""Helpers the tensor op modules share: dimensions as Python ints where static and
int64 scalars where only known at run time, axes, index grids.
"""
from __future__ import annotations

from typing import Any, List, Sequence, Union

import numpy as np

from tfx_bridge.onnx_tf.core import is_const
from tfx_bridge.onnx_tf.lazy import tf as _tf

Dim = Union[int, Any]  # a Python int (static) or a scalar int64 tf.Tensor (run time)

INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FIX_CONST = "compute it from constants or shapes only (not tensor values)"


# --------------------------------------------------------------------------- helpers


def _axis(node, axis: int, rank: int, what: str = "axis") -> int:
    """A (possibly negative) axis in [0, rank); refused when out of range."""
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        node.refuse(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _dims(node, i: int) -> List[Dim]:
    """Input ``i``'s dims: Python ints where static, int64 scalars of tf.shape elsewhere."""
    static = node.shape(i)
    if all(d is not None for d in static):
        return [int(d) for d in static]
    dyn = _tf().shape(node.t(i), out_type=_tf().int64)
    return [int(d) if d is not None else dyn[j] for j, d in enumerate(static)]


def vec(dims: Sequence[Dim]):
    """A shape vector (int64): numpy when every dim is static, else a stacked tensor."""
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return np.array([int(d) for d in dims], np.int64)
    tf = _tf()
    return tf.stack([tf.cast(d, tf.int64) for d in dims])


def _prod(dims: Sequence[Dim]) -> Dim:
    result: Dim = 1
    for d in dims:
        result = result * d
    return result


def i64(value):
    """An integer value (numpy or tensor) as int64 of the same kind."""
    if is_const(value):
        return value.astype(np.int64)
    return _tf().cast(value, _tf().int64)


def _const_ints(node, i: int, what: str) -> List[int]:
    return [int(v) for v in np.asarray(node.const(i, what)).reshape(-1)]


def normalize_indices(indices, dim: Dim):
    """Negative indices counted from the end (ONNX) as non-negative ones (TF)."""
    tf = _tf()
    if is_const(indices) and isinstance(dim, int):
        return np.where(indices < 0, indices + dim, indices)
    indices = tf.convert_to_tensor(indices)
    return tf.where(indices < 0, indices + tf.cast(dim, indices.dtype), indices)


def _grid(dims: Sequence[Dim], axis_values, axis: int):
    """Full coordinates [..., rank] over ``dims``, with ``axis_values`` along ``axis``
    (GatherElements/ScatterElements as GatherND/ScatterND)."""
    tf = _tf()
    axis_values = tf.cast(axis_values, tf.int64)
    coords = []
    for j, d in enumerate(dims):
        if j == axis:
            coords.append(axis_values)
            continue
        shape = [1] * len(dims)
        shape[j] = -1
        coords.append(tf.broadcast_to(tf.reshape(tf.range(tf.cast(d, tf.int64)), shape),
                                      tf.shape(axis_values, out_type=tf.int64)))
    return tf.stack(coords, axis=-1)


def _scalar(value):
    tf = _tf()
    if is_const(value):
        return np.asarray(value).reshape(())
    return tf.reshape(value, [])
