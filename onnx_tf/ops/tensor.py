"""ONNX tensor ops in ONNX semantics (see to_tf/core.py for the handler contract).

Shape manipulation, indexing, scatter/gather, padding and the small
index-producing ops (TopK, ArgMax, NonZero, Unique, ...). Layouts stay as in
ONNX; shapes that are only known at run time are built from ``tf.shape`` so
dynamic dimensions are never frozen. Shape arithmetic over constants is
folded in numpy where the result is needed as a Python value (axes, perms).

Size: an op table (about 45 ONNX ops, each a short self-contained handler
over shared shape-folding helpers).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

import numpy as np

from tfx_bridge.onnx_tf.core import is_const, tf_dtype
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import REQUIRED, op

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


def _vec(dims: Sequence[Dim]):
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


def _i64(value):
    """An integer value (numpy or tensor) as int64 of the same kind."""
    if is_const(value):
        return value.astype(np.int64)
    return _tf().cast(value, _tf().int64)


def _const_ints(node, i: int, what: str) -> List[int]:
    return [int(v) for v in np.asarray(node.const(i, what)).reshape(-1)]


def _normalize_indices(indices, dim: Dim):
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
        return tf.reshape(node.t(0), _vec(target))
    target = tf.cast(node.t(1), tf.int64)
    length = target.shape[0]
    if length is None:
        node.refuse("a run-time shape of unknown length", FIX_CONST)
    if not allowzero:
        dims = _dims(node, 0)
        padded = _vec((dims + [1] * length)[:length])
        target = tf.where(tf.equal(target, 0), padded, target)
    return tf.reshape(node.t(0), target)


@op("Flatten", attrs={"axis": 1})
def flatten(node):
    dims = _dims(node, 0)
    axis = int(node.attr("axis"))
    rank = len(dims)
    if not -rank <= axis <= rank:
        node.refuse(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return _tf().reshape(node.t(0), _vec([_prod(dims[:axis]), _prod(dims[axis:])]))


@op("Transpose", attrs={"perm": None})
def transpose(node):
    rank = node.rank(0)
    perm = node.attr("perm")
    perm = list(range(rank))[::-1] if perm is None else [_axis(node, p, rank, "perm")
                                                          for p in perm]
    return _tf().transpose(node.t(0), perm)


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


def _runtime_axes(node, axes, rank: int):
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
        axes, count = _runtime_axes(node, axes, rank)
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
        axes, _ = _runtime_axes(node, axes, rank)
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
        starts, ends = _i64(node.value(1)), _i64(node.value(2))
        axes = node.maybe_const(3) if node.has(3) else None
        if node.has(3) and axes is None:
            return _slice_runtime_axes(node, starts, ends)
        axes = None if axes is None else [int(a) for a in axes.reshape(-1)]
        steps = node.maybe_const(4) if node.has(4) else None
        if node.has(4) and steps is None:
            steps = _i64(node.value(4))
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

    # strided_slice canonicalizes (negative -> + dim, clamping by step sign) as ONNX does.
    return tf.strided_slice(node.t(0), full(starts, 0), full(ends, 0), full(steps, 1),
                            begin_mask=mask, end_mask=mask)


def _slice_runtime_axes(node, starts, ends):
    """Slice whose axes are known only at run time: full-rank begin/end/strides by scatter."""
    tf = _tf()
    rank = node.rank(0)
    axes, count = _runtime_axes(node, tf.reshape(tf.cast(node.t(3), tf.int64), [-1]), rank)
    steps = _i64(node.value(4)) if node.has(4) else np.ones(count, np.int64)
    where = axes[:, None]

    def full(values, base: int):
        return tf.tensor_scatter_nd_update(tf.fill([rank], np.int64(base)), where,
                                           tf.reshape(tf.cast(values, tf.int64), [count]))

    int64_max = np.iinfo(np.int64).max
    return tf.strided_slice(node.t(0), full(starts, 0), full(ends, int64_max), full(steps, 1))


# --------------------------------------------------------------------------- gather/scatter


@op("Gather", attrs={"axis": 0})
def gather(node):
    tf = _tf()
    dims = _dims(node, 0)
    axis = _axis(node, node.attr("axis"), len(dims))
    indices = _normalize_indices(node.value(1), dims[axis])
    return tf.gather(node.t(0), indices, axis=axis)


@op("GatherElements", attrs={"axis": 0}, since=11)
def gather_elements(node):
    tf = _tf()
    dims = _dims(node, 0)
    axis = _axis(node, node.attr("axis"), len(dims))
    indices = _normalize_indices(node.value(1), dims[axis])
    coords = _grid(_dims(node, 1), indices, axis)
    return tf.gather_nd(node.t(0), coords)


@op("GatherND", attrs={"batch_dims": 0}, since=11)
def gather_nd(node):
    tf = _tf()
    batch = int(node.attr("batch_dims"))
    dims = _dims(node, 0)
    depth = node.shape(1)[-1]
    if depth is None:
        node.refuse("indices with a run-time last dimension")
    indices = tf.convert_to_tensor(node.t(1))
    bound = tf.cast(_vec(dims[batch:batch + depth]), indices.dtype)
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
    dims = _dims(node, 0)
    axis = _axis(node, node.attr("axis"), len(dims))
    indices = _normalize_indices(node.value(1), dims[axis])
    coords = _grid(_dims(node, 1), indices, axis)
    return _scatter_nd(node, tf.convert_to_tensor(node.t(0)), coords,
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
    bound = _vec(_dims(node, 0)[:depth])
    indices = tf.where(indices < 0, indices + bound, indices)
    return _scatter_nd(node, tf.convert_to_tensor(node.t(0)), indices,
                       tf.convert_to_tensor(node.t(2)), node.attr("reduction"))


# --------------------------------------------------------------------------- broadcast/pad


@op("Expand", since=8)
def expand(node):
    tf = _tf()
    target = node.maybe_const(1)
    dims = _dims(node, 0)
    if target is not None and all(isinstance(d, int) for d in dims):
        out = np.broadcast_shapes(tuple(dims), tuple(int(v) for v in target.reshape(-1)))
        return tf.broadcast_to(node.t(0), np.array(out, np.int64))
    target = tf.cast(node.t(1), tf.int64)
    out = tf.broadcast_dynamic_shape(tf.convert_to_tensor(_vec(dims)), target)
    return tf.broadcast_to(node.t(0), out)


@op("Tile", since=6)
def tile(node):
    tf = _tf()
    x = node.t(0)
    if x.dtype == tf.uint16:  # no CPU Tile kernel: tile the same bits as int16
        return tf.bitcast(tf.tile(tf.bitcast(x, tf.int16), _i64(node.value(1))), tf.uint16)
    return tf.tile(x, _i64(node.value(1)))


PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_index(mode: str, dim: Dim, begin: int, end: int):
    """Source indices along one axis for edge/reflect/wrap padding (negative pads crop)."""
    tf = _tf()
    idx = tf.range(-begin, tf.cast(dim, tf.int64) + end, dtype=tf.int64)
    if mode == "edge":
        return tf.clip_by_value(idx, 0, tf.cast(dim, tf.int64) - 1)
    if mode == "wrap":
        return tf.math.floormod(idx, tf.cast(dim, tf.int64))
    period = tf.maximum(2 * (tf.cast(dim, tf.int64) - 1), 1)  # reflect, without the edge
    m = tf.math.floormod(idx, period)
    return tf.where(m >= dim, period - m, m)


@op("Pad", attrs={"mode": "constant", "pads": None, "value": 0.0}, since=2,
    check=lambda info: None if info.attrs.get("mode", "constant") in PAD_MODES else
    f"mode={info.attrs.get('mode')!r} is not supported (one of {', '.join(PAD_MODES)})")
def pad(node):
    tf = _tf()
    dims = _dims(node, 0)
    rank = len(dims)
    mode = node.attr("mode")
    x = node.t(0)
    if node.opset < 11:
        if node.attr("pads") is None:
            node.refuse("Pad without pads")
        pads = np.array(node.attr("pads"), np.int64)
        value = np.array(node.attr("value"), x.dtype.as_numpy_dtype)
        axes: Any = list(range(rank))
    else:
        pads = node.maybe_const(1)
        value = node.value(2) if node.has(2) else np.zeros((), x.dtype.as_numpy_dtype)
        axes = node.maybe_const(3) if node.has(3) else np.arange(rank)
        if axes is None:
            axes, _ = _runtime_axes(node, tf.reshape(tf.cast(node.t(3), tf.int64), [-1]),
                                    rank)
        else:
            axes = [_axis(node, a, rank) for a in axes.reshape(-1)]
    if pads is not None and isinstance(axes, list):
        pads = [int(p) for p in pads.reshape(-1)]
        if len(pads) != 2 * len(axes):
            node.refuse(f"{len(pads)} pads for {len(axes)} axes")
        widths: Any = [(0, 0)] * rank
        for j, a in enumerate(axes):
            widths[a] = (pads[j], pads[len(axes) + j])
    else:  # run-time pads or axes: a [rank, 2] tensor of (begin, end)
        count = len(axes) if isinstance(axes, list) else axes.shape[0]
        if count is None:
            node.refuse("run-time axes of unknown length", FIX_CONST)
        pairs = tf.transpose(tf.reshape(tf.cast(node.t(1), tf.int64), [2, count]))
        where = tf.reshape(tf.constant(axes, tf.int64) if isinstance(axes, list) else axes,
                           [count, 1])
        full = tf.scatter_nd(where, pairs, tf.constant([rank, 2], tf.int64))
        widths = [(full[a, 0], full[a, 1]) for a in range(rank)]
    if mode == "constant":
        if any(not isinstance(w, int) or w < 0 for pair in widths for w in pair):
            # Negative pads crop: slice first, then pad by the positive parts.
            begin = [tf.maximum(-b, 0) if not isinstance(b, int) else max(-b, 0)
                     for b, _ in widths]
            end = [d - (tf.maximum(-e, 0) if not isinstance(e, int) else max(-e, 0))
                   for d, (_, e) in zip(dims, widths, strict=True)]
            x = tf.strided_slice(x, _vec(begin), _vec(end))
        positive = _vec([(tf.maximum(w, 0) if not isinstance(w, int) else max(w, 0))
                         for pair in widths for w in pair])
        return tf.pad(x, tf.reshape(positive, [rank, 2]),
                      constant_values=tf.cast(_scalar(value), x.dtype))
    for a, (b, e) in enumerate(widths):
        if not isinstance(b, int) or not isinstance(e, int) or b or e:
            x = tf.gather(x, _pad_index(mode, dims[a], b, e), axis=a)
    return x


@op("ConstantOfShape", attrs={"value": None}, since=9)
def constant_of_shape(node):
    from onnx import numpy_helper
    tf = _tf()
    proto = node.attr("value")
    value = np.zeros((), np.float32) if proto is None else \
        numpy_helper.to_array(proto).reshape(-1)[0]
    shape_ = node.maybe_const(0)
    if shape_ is not None and int(np.prod(shape_)) <= 1 << 16:
        return np.full(shape_.astype(np.int64), value, dtype=value.dtype)
    return tf.fill(tf.cast(node.t(0), tf.int64), tf.constant(value))


@op("Range", since=11)
def range_(node):
    tf = _tf()
    values = [node.maybe_const(i) for i in range(3)]
    if all(v is not None for v in values):
        start, limit, delta = (v.reshape(()) for v in values)
        return np.arange(start, limit, delta, dtype=start.dtype)
    start, limit, delta = (tf.reshape(node.t(i), []) for i in range(3))
    dtype = start.dtype
    f64 = [tf.cast(v, tf.float64) for v in (start, limit, delta)]
    # ONNX: max(ceil((limit - start) / delta), 0) elements (TF's range errors instead).
    count = tf.cast(tf.maximum(tf.math.ceil((f64[1] - f64[0]) / f64[2]), 0.0), tf.int64)
    if dtype.is_integer:
        steps = tf.range(count, dtype=tf.int64)
        return tf.cast(tf.cast(start, tf.int64) + steps * tf.cast(delta, tf.int64), dtype)
    return start + tf.cast(tf.range(count), dtype) * delta


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


@op("DepthToSpace", attrs={"blocksize": REQUIRED, "mode": "DCR"},
    check=lambda info: None if info.attrs.get("mode", "DCR") in ("DCR", "CRD") else
    f"mode={info.attrs.get('mode')!r} is not supported (DCR or CRD)")
def depth_to_space(node):
    tf = _tf()
    dims = _dims(node, 0)
    if len(dims) != 4:
        node.refuse("DepthToSpace on a tensor that is not 4-D (NCHW)")
    n, c, h, w = dims
    b = int(node.attr("blocksize"))
    if node.attr("mode") == "DCR":
        x = tf.reshape(node.t(0), _vec([n, b, b, c // b // b, h, w]))
        x = tf.transpose(x, [0, 3, 4, 1, 5, 2])
    else:
        x = tf.reshape(node.t(0), _vec([n, c // b // b, b, b, h, w]))
        x = tf.transpose(x, [0, 1, 4, 2, 5, 3])
    return tf.reshape(x, _vec([n, c // b // b, h * b, w * b]))


@op("SpaceToDepth", attrs={"blocksize": REQUIRED})
def space_to_depth(node):
    tf = _tf()
    dims = _dims(node, 0)
    if len(dims) != 4:
        node.refuse("SpaceToDepth on a tensor that is not 4-D (NCHW)")
    n, c, h, w = dims
    b = int(node.attr("blocksize"))
    x = tf.reshape(node.t(0), _vec([n, c, h // b, b, w // b, b]))
    x = tf.transpose(x, [0, 3, 5, 1, 2, 4])
    return tf.reshape(x, _vec([n, c * b * b, h // b, w // b]))


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
        rows = tf.reshape(moved, _vec([dims[axis], rest]))
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
