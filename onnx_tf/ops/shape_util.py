"""Shape vectors as far as they are known at conversion: the entries of a small integer
tensor read back through the shape ops that built it (used by shape.py and
gather_scatter.py to fold what a dynamic batch leaves static).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from tfx_bridge.onnx_tf.core import is_const
from tfx_bridge.onnx_tf.lazy import tf as _tf

# Ops whose output holds its input's values in the same order (rank 0 or 1).
_SAME_VALUES = ("Identity", "ExpandDims", "Squeeze", "Reshape")
_KNOWN_DEPTH = 16  # ops walked back; shape chains are a handful deep


def known_values(value, depth: int = _KNOWN_DEPTH) -> Optional[List[Optional[int]]]:
    """The entries of a rank-0/1 integer value as Python ints where known at conversion,
    None where only known per request; None when nothing can be said (rank, length).

    Reads back through Shape (the input's static dims), Cast, Pack, ConcatV2,
    GatherV2 and StridedSlice with constant indices, and reshapes of a vector.
    """
    if is_const(value):
        array = np.asarray(value)
        return [int(v) for v in array.reshape(-1)] if array.ndim <= 1 else None
    tf = _tf()
    if not isinstance(value, tf.Tensor) or not value.dtype.is_integer:
        return None
    static = value.shape
    if static.rank is None or static.rank > 1 or (static.rank == 1 and static[0] is None):
        return None
    length = 1 if static.rank == 0 else int(static[0])
    unknown = [None] * length
    got = tf.get_static_value(value) if depth > 0 else None
    if got is not None:
        return [int(v) for v in np.asarray(got).reshape(-1)]
    if depth <= 0:
        return unknown
    o = value.op
    if o.type == "Shape":
        dims = o.inputs[0].shape
        return unknown if dims.rank is None else [d for d in dims.as_list()]
    if o.type in _SAME_VALUES + ("Cast",):
        inner = known_values(o.inputs[0], depth - 1)
        return inner if inner is not None and len(inner) == length else unknown
    if o.type == "Pack":
        parts = [known_values(t, depth - 1) for t in o.inputs]
        return [p[0] if p and len(p) == 1 else None for p in parts]
    if o.type == "ConcatV2":
        out: List[Optional[int]] = []
        for t in o.inputs[:-1]:
            part = known_values(t, depth - 1)
            out += part if part is not None else [None] * (t.shape[0] or 0)
        return out if len(out) == length else unknown
    if o.type == "GatherV2":
        params = known_values(o.inputs[0], depth - 1)
        indices = tf.get_static_value(o.inputs[1])
        axis = tf.get_static_value(o.inputs[2])
        if params is None or indices is None or axis is None or int(axis) != 0:
            return unknown
        picked = [int(i) for i in np.asarray(indices).reshape(-1)]
        if not all(0 <= i < len(params) for i in picked) or len(picked) != length:
            return unknown  # TF's gather refuses these at run time; say nothing here
        return [params[i] for i in picked]
    if o.type == "StridedSlice" and all(o.get_attr(m) == 0 for m in (
            "begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")):
        params = known_values(o.inputs[0], depth - 1)
        bounds = [tf.get_static_value(t) for t in o.inputs[1:]]
        if params is None or any(b is None or np.size(b) != 1 for b in bounds):
            return unknown
        begin, end, stride = (int(np.asarray(b).reshape(-1)[0]) for b in bounds)
        picked = params[begin:end:stride]  # the clamping strided_slice applies too
        return picked if len(picked) == length else unknown
    return unknown
