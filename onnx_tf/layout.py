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
        return tf.transpose(physical, inverse(perm))
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
    return tf.transpose(value, list(perm))


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
