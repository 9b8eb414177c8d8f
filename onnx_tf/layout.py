"""Channel-last values: a tensor held in another axis order than ONNX's, moved through
the ops whose meaning does not depend on the order.

TF's CPU kernels for convolution and pooling are channel-last only (with oneDNN
off), so a convolution's output is produced channel-last. Instead of transposing
it back at once, the interpreter keeps it as a :class:`Permuted` value (the
physical tensor and its permutation) and lets layout-free ops (elementwise,
activations, Concat, Pad, Resize, reductions) run on the physical tensor with
their axes remapped. A consumer that needs ONNX's layout gets it from
``Node.t(i)``, computed once per value and shared by every consumer; where the
permutation only moves size-1 axes that is a reshape, not a transpose. Subgraphs,
folded constants and graph outputs always see ONNX's layout.

Convention: ``physical = transpose(logical, perm)``, so physical axis ``j`` is
logical axis ``perm[j]`` and logical axis ``a`` sits at ``perm.index(a)``.

Size: one module, because each op's plan is the same remapping of axes through
the held permutation, and Reshape's (the longest) shares the helpers the others
use; split by op family they would import each other both ways.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfx_bridge.onnx_tf.lazy import tf as _tf


def channel_last(rank: int) -> Tuple[int, ...]:
    """The permutation NC<spatial> -> N<spatial>C."""
    return (0, *range(2, rank), 1)


class Permuted:
    """A value whose tensor is held in the axis order ``perm`` of ONNX's (logical) order."""

    def __init__(self, physical, perm: Sequence[int]):
        self.physical = physical
        self.perm = tuple(int(p) for p in perm)
        self._logical = None

    @property
    def dtype(self):
        return self.physical.dtype

    @property
    def shape(self):
        """The logical static shape (no op is built)."""
        tf = _tf()
        dims = self.physical.shape.as_list()
        return tf.TensorShape([dims[self.perm.index(a)] for a in range(len(self.perm))])

    def logical(self, cache: bool = True):
        """The tensor in ONNX's layout; built once when ``cache`` (the enclosing graph's
        nodes), afresh inside subgraphs (a tensor built in a branch cannot be reused
        outside it)."""
        if self._logical is not None:
            return self._logical
        tensor = _to_logical(self.physical, self.perm, self.shape)
        if cache:
            self._logical = tensor
        return tensor

    def dyn_shape(self, dtype):
        """The logical shape as a tensor (static where known)."""
        tf = _tf()
        static = self.shape
        if static.is_fully_defined():
            return np.array(static.as_list(), dtype.as_numpy_dtype)
        return tf.gather(tf.shape(self.physical, out_type=dtype), inverse(self.perm))


def inverse(perm: Sequence[int]) -> List[int]:
    return [int(j) for j in np.argsort(perm)]


def _to_logical(physical, perm, logical_shape):
    """transpose(physical, inverse(perm)); a reshape when the axes that move are all of
    size 1 (the element order is the same)."""
    tf = _tf()
    dims = logical_shape.as_list()
    moved = [a for a in perm if dims[a] != 1]
    if moved != sorted(moved):
        return merged_transpose(physical, inverse(perm))
    unknown = sum(d is None for d in dims)
    if unknown == 0:
        return tf.reshape(physical, dims)
    if unknown == 1:
        return tf.reshape(physical, [-1 if d is None else d for d in dims])
    return tf.reshape(physical, tf.gather(tf.shape(physical), inverse(perm)))


def to_physical(value, perm: Sequence[int]):
    """A logical value (numpy or tensor, rank <= len(perm)) broadcast-aligned to ``perm``:
    left-padded with size-1 axes as numpy broadcasting does, then permuted."""
    rank = len(perm)
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return value
        return np.transpose(value.reshape((1,) * (rank - value.ndim) + value.shape), perm)
    tf = _tf()
    r = value.shape.rank
    if r == 0:
        return value
    if r < rank:
        value = tf.reshape(value, tf.concat([tf.ones([rank - r], tf.int32),
                                             tf.shape(value)], 0))
    return merged_transpose(value, perm)


# --------------------------------------------------------------------------- op tables

# Ops computed element by element from input 0 (other inputs scalars or absent).
UNARY = frozenset({
    "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Sigmoid",
    "Tanh", "Softplus", "Softsign", "Mish", "Gelu", "ThresholdedRelu", "Shrink", "Clip",
    "Dropout", "Identity", "Cast", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf",
    "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Not", "IsNaN", "IsInf"})
# Ops broadcasting their inputs against each other, numpy-style (opset >= 7).
BROADCAST = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Where",
    "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor"})
REDUCE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                    "ReduceSumSquare"})
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def plan(node, perm: Tuple[int, ...]) -> Optional[Tuple[list, Dict[str, Any], Any]]:
    """How to run ``node`` (its inputs as given, one or more of them :class:`Permuted`
    with ``perm``) on physical tensors: (inputs, attribute overrides, output perm), or
    None when the op is not known to be layout-free in this form. ``output perm`` is
    ``perm``, or a callable of the output's rank for reductions."""
    op_type = node.op_type
    rank = len(perm)
    inputs = list(node.inputs)
    first = inputs[0] if inputs else None
    if op_type in UNARY:
        if not isinstance(first, Permuted) or any(
                isinstance(v, Permuted) or (v is not None and _rank(v) > 0)
                for v in inputs[1:]):
            return None
        return [first.physical, *inputs[1:]], {}, perm
    if op_type in BROADCAST:
        if node.opset < 7:
            return None
        return _broadcast(inputs, perm), {}, perm
    if op_type == "Concat":
        if any(v is not None and _rank(v) != rank for v in inputs):
            return None
        axis = int(node.attr("axis"))
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank:
            return None
        return _broadcast(inputs, perm), {"axis": perm.index(axis)}, perm
    if op_type == "Pad":
        return _pad(node, inputs, perm)
    if op_type == "Resize":
        return _resize(node, inputs, perm)
    if op_type in REDUCE:
        return _reduce(node, inputs, perm)
    if op_type == "Transpose":
        return _transpose(node, inputs, perm)
    if op_type == "Reshape":
        return _reshape(node, inputs, perm)
    if op_type == "Slice":
        return _slice(node, inputs, perm)
    if op_type == "Split":
        x = _held_first(inputs)
        if x is None:
            return None
        axis = int(node.attr("axis"))
        if not -rank <= axis < rank:
            return None
        return [x.physical, *inputs[1:]], {"axis": perm.index(axis % rank)}, perm
    if op_type in ("Softmax", "LogSoftmax") and node.opset >= 13:
        if not isinstance(first, Permuted):
            return None
        axis = node.attr("axis")
        axis = -1 if axis is None else int(axis)
        axis = axis + rank if axis < 0 else axis
        return [first.physical], {"axis": perm.index(axis)}, perm
    return None


def _held_first(inputs) -> Optional[Permuted]:
    """The first input when it alone is held permuted (the others are parameters)."""
    x = inputs[0] if inputs else None
    if not isinstance(x, Permuted) or any(isinstance(v, Permuted) for v in inputs[1:]):
        return None
    return x


def _rank(value) -> int:
    if isinstance(value, (np.ndarray, Permuted)):
        return len(value.shape)
    return value.shape.rank


def _broadcast(inputs: list, perm) -> Optional[list]:
    out = []
    for v in inputs:
        if v is None:
            out.append(None)
        elif isinstance(v, Permuted):
            if v.perm != tuple(perm):
                return None
            out.append(v.physical)
        elif _rank(v) is None or _rank(v) > len(perm):
            return None
        else:
            out.append(to_physical(v, perm))
    return out


def _pad(node, inputs, perm):
    x = _held_first(inputs)
    if x is None:
        return None
    rank = len(perm)
    if node.opset < 11:
        pads = node.attr("pads")
        if pads is None or len(pads) != 2 * rank:
            return None
        pads = list(pads)
        return [x.physical], {"pads": [pads[a] for a in perm] + [pads[rank + a]
                                                                  for a in perm]}, perm
    axes = node.maybe_const(3) if node.has(3) else np.arange(rank)
    if axes is None:
        return None
    physical_axes = np.array([perm.index(int(a) % rank) for a in axes.reshape(-1)], np.int64)
    out = [x.physical, *inputs[1:3]]
    while len(out) < 3:
        out.append(None)
    return [*out, physical_axes], {}, perm


def _resize(node, inputs, perm):
    """Resize is separable per axis: the same scales over the physical positions."""
    x = _held_first(inputs)
    if x is None:
        return None
    rank = len(perm)
    axes = node.attr("axes")
    axes = [a % rank for a in axes] if axes else list(range(rank))
    return [x.physical, *inputs[1:]], {"axes": [perm.index(a) for a in axes]}, perm


def _reduce(node, inputs, perm):
    x = _held_first(inputs)
    if x is None:
        return None
    rank = len(perm)
    attr_axes = node.attr("axes")
    if attr_axes is not None:
        axes = np.asarray(attr_axes, np.int64).reshape(-1)
    elif node.has(1):
        axes = node.maybe_const(1)
        if axes is None:
            return None
        axes = np.asarray(axes, np.int64).reshape(-1)
    else:
        return None
    if axes.size == 0:
        return None
    logical = sorted({int(a) % rank for a in axes})
    physical = [perm.index(a) for a in logical]
    overrides: Dict[str, Any] = {}
    out = [x.physical, *inputs[1:]]
    if attr_axes is not None:
        overrides["axes"] = physical
    else:
        out[1] = np.array(physical, np.int64)
    if node.attr("keepdims"):
        return out, overrides, perm
    kept = [a for a in perm if a not in logical]
    renumber = {a: j for j, a in enumerate(sorted(kept))}
    return out, overrides, tuple(renumber[a] for a in kept)


def _transpose(node, inputs, perm):
    """No op: the held tensor is already the output in another axis order. Output axis
    ``a`` is input axis ``t[a]``, so physical axis ``j`` (input axis ``perm[j]``) is
    output axis ``inverse(t)[perm[j]]``."""
    x = _held_first(inputs)
    if x is None:
        return None
    rank = len(perm)
    t = node.attr("perm")
    t = list(range(rank))[::-1] if t is None else [int(a) % rank for a in t]
    if sorted(t) != list(range(rank)):
        return None
    back = inverse(t)
    return [x.physical], {"perm": list(range(rank))}, tuple(back[a] for a in perm)


def _slice(node, inputs, perm):
    """Slice with constant axes (or none: the leading ones): the same bounds on the
    axes' physical positions."""
    x = _held_first(inputs)
    if x is None:
        return None
    rank = len(perm)
    if node.opset < 10:
        starts = node.attr("starts")
        if starts is None:
            return None
        axes = node.attr("axes")
        axes = list(range(len(starts))) if axes is None else list(axes)
        if not all(-rank <= a < rank for a in axes):
            return None
        return [x.physical], {"axes": [perm.index(a % rank) for a in axes]}, perm
    if node.has(3):
        axes = node.maybe_const(3)
        if axes is None:
            return None
        axes = [int(a) for a in axes.reshape(-1)]
    else:
        count = _shape_of(inputs[1])
        if count is None or len(count) != 1 or count[0] is None:
            return None
        axes = list(range(count[0]))
    if not all(-rank <= a < rank for a in axes):
        return None
    out = list(inputs) + [None] * (5 - len(inputs))
    out[0] = x.physical
    out[3] = np.array([perm.index(a % rank) for a in axes], np.int64)
    return out, {}, perm


def _shape_of(value):
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return list(value.shape)
    return None if value.shape.rank is None else value.shape.as_list()


def _reshape(node, inputs, perm):
    """Reshape as a reshape of the held tensor where each run of input axes that becomes
    a run of output axes (equal element counts; size-1 axes ignored) is held together in
    ONNX's order: the output is then held in those runs' physical order. Where a run is
    held apart or reordered (a channel shuffle's merge after its transpose), one
    transpose gathers it, taken only when the output comes out channel-last (the
    convolutions' order) and kept so; otherwise None (ONNX's layout, then reshape)."""
    x = _held_first(inputs)
    if x is None or node.opset < 5 or int(node.attr("allowzero")):
        return None
    from tfx_bridge.onnx_tf.ops.shape_util import known_values  # imports core, which imports us

    # An entry known only per request (a batch size read by Shape) is the one -1.
    target = known_values(inputs[1])
    if target is None:
        return None
    dims = x.shape.as_list()
    out = _reshape_dims(dims, [-1 if v is None else v for v in target])
    if out is None:
        return None
    groups = _reshape_groups(dims, out)
    if groups is None:
        return None
    position = {a: j for j, a in enumerate(perm)}
    held = [a for a in perm if dims[a] != 1]  # the significant input axes, as held
    order = sorted(groups, key=lambda g: min(position[a] for a in g[0]))
    gathered = [a for g in order for a in g[0]]
    physical = x.physical
    rank_out = len(out)
    out_perm = [b for g in order for b in g[1]]
    for b in range(rank_out):  # size-1 output axes: after their logical predecessor
        if out[b] == 1:
            out_perm.insert(out_perm.index(b - 1) + 1 if b else 0, b)
    if gathered != held:
        if tuple(out_perm) != channel_last(rank_out) or rank_out < 3:
            return None
        ones = [a for a in perm if dims[a] == 1]
        physical = merged_transpose(physical, [position[a] for a in gathered + ones])
    shape = np.array([-1 if out[b] is None else out[b] for b in out_perm], np.int64)
    return [physical, shape], {}, tuple(out_perm)


def merged_transpose(x, perm: Sequence[int]):
    """``tf.transpose(x, perm)`` run on the fewest axes: runs of axes that stay adjacent
    and in order are merged (and size-1 axes dropped) by a reshape first. TF's kernel
    does not merge them itself: a channel shuffle's [N, H, W, 2, C/2] -> [N, H, W,
    C/2, 2] took twice the time of the same move as [N*H*W, 2, C/2] -> [.., C/2, 2]
    (oneDNN off, 2 threads, [32, 28, 28, 116]); an NCHW image batch into channel-last,
    [32, 3, 224, 224], 7.2 ms as four axes and 4.6 ms as [32, 3, H*W] -> [32, H*W, 3]."""
    tf = _tf()
    # A reshape's -1 is ambiguous beside a 0-sized axis (TF takes it as 1).
    if x.shape.rank is None or sum(d is None for d in x.shape.as_list()) > 1 \
            or 0 in x.shape.as_list():
        return tf.transpose(x, list(perm))
    dims = x.shape.as_list()
    kept = [a for a in perm if dims[a] != 1]
    runs: List[List[int]] = []
    for a in kept:
        if runs and a > runs[-1][-1] and all(dims[b] == 1 for b in
                                              range(runs[-1][-1] + 1, a)):
            runs[-1].append(a)
        else:
            runs.append([a])
    if len(runs) == len(dims) or len(runs) < 2:
        return tf.transpose(x, list(perm)) if len(runs) >= 2 else tf.reshape(
            x, [-1 if dims[a] is None else dims[a] for a in perm])

    def size(run):
        sizes = [dims[a] for a in run]
        return -1 if None in sizes else int(np.prod(sizes))

    by_input = sorted(runs, key=lambda r: r[0])
    y = tf.reshape(x, [size(r) for r in by_input])
    y = tf.transpose(y, [by_input.index(r) for r in runs])
    return tf.reshape(y, [-1 if dims[a] is None else dims[a] for a in perm])


def _reshape_dims(dims, target) -> Optional[List[Optional[int]]]:
    """ONNX Reshape's output dims (allowzero 0) with at most the batch-like unknown
    input dim carried through as None; None when they cannot be told here."""
    if any(d == 0 for d in dims) or sum(d is None for d in dims) > 1:
        return None
    out: List[Optional[int]] = []
    for j, v in enumerate(target):
        if v == 0:
            if j >= len(dims):
                return None
            out.append(dims[j])
        elif v >= -1:
            out.append(v)
        else:
            return None
    if out.count(-1) > 1 or (-1 not in out and None in dims and None not in out):
        return None
    known_in = int(np.prod([d for d in dims if d is not None], dtype=np.int64))
    known_out = int(np.prod([d for d in out if d is not None and d != -1], dtype=np.int64))
    if -1 in out:
        if None in dims and None in out:
            return None
        if None in dims:
            if known_in != known_out:
                return None  # the -1 would be a multiple of the unknown dim
            return [None if d == -1 else d for d in out]
        if known_out == 0 or known_in % known_out:
            return None
        return [known_in // known_out if d == -1 else d for d in out]
    if (None in dims) != (None in out) or known_in != known_out:
        return None
    return out


def _reshape_groups(dims, out) -> Optional[List[Tuple[List[int], List[int]]]]:
    """Runs of input and output axes with equal element counts, in ONNX's order, size-1
    axes left out; an unknown dim pairs only with the unknown dim."""
    ins = [a for a, d in enumerate(dims) if d != 1]
    outs = [b for b, d in enumerate(out) if d != 1]
    groups = []
    i = j = 0
    while i < len(ins) or j < len(outs):
        if i == len(ins) or j == len(outs):
            return None
        gi, go = [ins[i]], [outs[j]]
        pi, po = dims[ins[i]], out[outs[j]]
        i, j = i + 1, j + 1
        if pi is None or po is None:
            if pi is not None or po is not None:
                return None
            groups.append((gi, go))
            continue
        while pi != po:
            if pi < po:
                if i == len(ins) or dims[ins[i]] is None:
                    return None
                pi *= dims[ins[i]]
                gi.append(ins[i])
                i += 1
            else:
                if j == len(outs) or out[outs[j]] is None:
                    return None
                po *= out[outs[j]]
                go.append(outs[j])
                j += 1
        groups.append((gi, go))
    return groups
