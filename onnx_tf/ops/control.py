"""ONNX control flow in ONNX semantics (see onnx_tf/core.py for the handler contract).


- ``If`` picks its branch at conversion time when the condition is a constant,
  else builds ``tf.cond`` (both branches traced, their outputs must agree in
  dtype and rank).
- ``Loop`` and ``Scan`` become ``tf.while_loop`` whose body interprets the ONNX
  body graph on the loop variables; scan outputs accumulate in TensorArrays.
  A loop with a small constant trip count (and a constant condition) is
  unrolled instead, so its values fold and keep static shapes. Scan is in
  scan.py, on this module's sub-graph glue.

Sequence, optional, string and the other quantized ops are not registered:
core refuses them by name (:data:`OP_FIXES` holds the fixes to show).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from tfx_bridge.onnx_tf import core, dtypes
from tfx_bridge.onnx_tf.core import is_const
from tfx_bridge.onnx_tf.errors import Unsupported
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import REQUIRED, op

# Loops with a constant trip count up to this many iterations are unrolled.
UNROLL_MAX_TRIPS = 16

# Fixes for the ops of this family that are deliberately left unregistered (core's
# "no converter for this op" refusal); core's _OP_FIXES can merge these.
_SEQUENCE_FIX = ("a Python list of tensors in the model (torch.split/unbind results kept as a "
                 "list, a loop appending to a list): keep tensors, e.g. torch.stack/cat the "
                 "list inside the model or loop over a fixed count")
OP_FIXES = {
    **{name: _SEQUENCE_FIX for name in (
        "SequenceConstruct", "SequenceAt", "SequenceEmpty", "SequenceInsert", "SequenceErase",
        "SequenceLength", "SplitToSequence", "ConcatFromSequence", "SequenceMap")},
    **{name: ("an optional value (None passed through the model): pass a tensor or drop "
              "the argument") for name in ("Optional", "OptionalHasElement",
                                           "OptionalGetElement")},
    **{name: "string processing in the model: tokenize/preprocess outside the served model"
       for name in ("StringNormalizer", "RegexFullMatch", "StringConcat", "StringSplit",
                    "TfIdfVectorizer")},
    **{name: ("a quantized model: export the float model (before torch.quantization / "
              "quantize_dynamic), only int8/uint8/int16/uint16 Quantize/DequantizeLinear "
              "are supported") for name in ("QLinearConv", "ConvInteger",
                                            "MatMulInteger")},
}


def _tensor(node, value):
    """A subgraph output (numpy constant or tensor) as a tf.Tensor."""
    if value is None:
        return None
    if is_const(value):
        return node.graph.converter.tensor(value, node.folding)
    return _tf().convert_to_tensor(value)


def run_body(node, attr: str, inputs: Sequence[Any]) -> List[Any]:
    """Runs graph attribute ``attr`` on ``inputs`` (seeing the enclosing graphs' values),
    naming the inner node in a refusal (core's run_sub with the failing node named)."""
    from onnx import numpy_helper
    graph = node.subgraph(attr)
    converter = node.graph.converter
    sub = core.GraphRun(converter, node.graph)
    for vi in list(graph.value_info) + list(graph.output):
        converter.value_info.setdefault(vi.name, vi)
    for spec, value in zip(graph.input, inputs, strict=False):
        sub.values[spec.name] = value
    for init in graph.initializer:
        sub.values[init.name] = numpy_helper.to_array(init)
    for inner in graph.node:
        where = f"in {attr}, node {inner.name or '(unnamed)'} ({inner.op_type})"
        try:
            sub.run_node(inner)
        except Unsupported as e:
            raise Unsupported(f"{where}: {e.variant}", e.fix) from e
        except (TypeError, ValueError) as e:  # a TF op refusing what a handler built
            first = (str(e).strip().splitlines() or [""])[0][:300]
            raise Unsupported(f"{where}: conversion error: {type(e).__name__}: {first}") from e
    return [sub.lookup(o.name) for o in graph.output]


def _declared(vi):
    """(elem_type or None, dims list or None) declared by a subgraph's input/output."""
    if not vi.type.HasField("tensor_type"):
        raise Unsupported(f"subgraph value {vi.name!r} is not a tensor (sequence/optional)",
                          "carry plain tensors through the loop")
    tt = vi.type.tensor_type
    dims = None
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    return tt.elem_type or None, dims


def _scalar(node, value, dtype, what: str):
    """A one-element condition/count input as a scalar tensor of ``dtype``."""
    tf = _tf()
    t = _tensor(node, value)
    if t.shape.num_elements() not in (None, 1):
        node.refuse(f"{what} has shape {t.shape}, ONNX needs one element")
    return tf.cast(tf.reshape(t, []), dtype)


# --------------------------------------------------------------------------- If


_STATIC_DEPTH = 24  # producers walked back from an If condition


def _static(run, name: str, depth: int = 0):
    """What the static shapes alone say value ``name`` is: a numpy array, a list of
    dims with None where unknown (a Shape's result), or None when they do not say.

    torch exports ``squeeze(dim)`` of a size it did not know as
    ``If(Shape(x)[dim] == 1, Squeeze, Identity)``; once converted, x's size is
    often static (Mamba2's heads: 8), and the branch it rules out would not
    build (Squeeze of a dimension 8). The condition is then evaluated here.
    """
    if depth > _STATIC_DEPTH:
        return None
    try:
        value = run.lookup(name)
    except KeyError:
        return None
    if is_const(value):
        return np.asarray(value)
    proto, run = run.producer(name)  # its inputs are names of the graph that ran it
    if proto is None:
        return None
    attrs = {a.name: a for a in proto.attribute}
    if proto.op_type == "Shape":
        dims = getattr(run.lookup(proto.input[0]), "shape", None)
        if dims is None or getattr(dims, "rank", None) is None:
            return None
        dims = list(dims.as_list()) if hasattr(dims, "as_list") else list(dims)
        start = attrs["start"].i if "start" in attrs else 0
        end = attrs["end"].i if "end" in attrs else len(dims)
        return dims[start:end]
    args = [_static(run, i, depth + 1) if i else None for i in proto.input]
    if proto.op_type == "Gather" and isinstance(args[0], list) and \
            isinstance(args[1], np.ndarray) and (attrs["axis"].i == 0 if "axis" in attrs
                                                 else True):
        picked = np.asarray(args[0], dtype=object)[args[1].astype(np.int64)]
        if any(d is None for d in np.ravel(picked)):
            return None
        return picked.astype(np.int64)
    if any(not isinstance(a, np.ndarray) for a in args):
        return None
    numeric = {"Equal": np.equal, "Greater": np.greater, "Less": np.less,
               "GreaterOrEqual": np.greater_equal, "LessOrEqual": np.less_equal,
               "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
    if proto.op_type in numeric and len(args) == 2:
        return numeric[proto.op_type](args[0], args[1])
    if proto.op_type == "Not":
        return np.logical_not(args[0])
    # Reshaping ops keep a one-element value's value (an If reads one element).
    if proto.op_type in ("Identity", "Squeeze", "Unsqueeze", "Reshape") and args[0].size == 1:
        return args[0]
    if proto.op_type == "Cast" and "to" in attrs:
        from onnx import helper

        return args[0].astype(helper.tensor_dtype_to_np_dtype(attrs["to"].i))
    return None


@op("If", attrs={"then_branch": REQUIRED, "else_branch": REQUIRED})
def if_(node):
    tf = _tf()
    cond = node.maybe_const(0)
    if cond is None:
        static = _static(node.graph, node.proto.input[0])
        cond = static if isinstance(static, np.ndarray) and static.dtype == bool else None
    if cond is not None:
        if cond.size != 1:
            node.refuse(f"the condition has {cond.size} elements, ONNX needs one")
        return run_body(node, "then_branch" if bool(cond.reshape(())) else "else_branch", [])
    pred = _scalar(node, node.value(0), tf.bool, "the condition")
    traced = {}

    def branch(attr: str, other: str) -> Callable[[], list]:
        def fn():
            outs = [_tensor(node, o) for o in run_body(node, attr, [])]
            traced[attr] = outs
            if other in traced:  # the second branch traced: both must agree
                _check_branches(node, traced["then_branch"], traced["else_branch"])
            return outs
        return fn

    outs = tf.cond(pred, branch("then_branch", "else_branch"),
                   branch("else_branch", "then_branch"))
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


def _check_branches(node, then_outs, else_outs) -> None:
    if len(then_outs) != len(else_outs):
        node.refuse(f"the branches give {len(then_outs)} and {len(else_outs)} outputs")
    for i, (a, b) in enumerate(zip(then_outs, else_outs, strict=True)):
        if a.dtype != b.dtype:
            node.refuse(f"output {i} is {a.dtype.name} in then_branch and {b.dtype.name} in "
                        "else_branch", "make both branches return the same dtype")
        if a.shape.rank is None or b.shape.rank is None or a.shape.rank != b.shape.rank:
            node.refuse(f"output {i} has shape {a.shape} in then_branch and {b.shape} in "
                        "else_branch (ranks differ or are unknown)",
                        "make both branches return tensors of the same rank")


# --------------------------------------------------------------------------- Loop


def _invariant(vi, initial):
    """Shape invariant for a loop-carried value: the body's declared input shape where it
    has one, else the initial value's static shape."""
    tf = _tf()
    _, dims = _declared(vi)
    if dims is not None:
        return tf.TensorShape(dims)
    return initial.shape


def _relaxed(shape):
    tf = _tf()
    return tf.TensorShape(None) if shape.rank is None else tf.TensorShape([None] * shape.rank)


def _while(node, cond_fn, body_fn, loop_vars, invariants):
    """tf.while_loop; retried with every carried dim relaxed if a value's shape changes
    across iterations (ONNX allows it when the body's inputs do not declare shapes)."""
    tf = _tf()
    try:
        return tf.while_loop(cond_fn, body_fn, loop_vars, shape_invariants=invariants)
    except ValueError as e:
        if "shape" not in str(e):
            raise
    relaxed = [inv if inv is None else _relaxed(inv) for inv in invariants]
    return tf.while_loop(cond_fn, body_fn, loop_vars, shape_invariants=relaxed)


def scan_array(node, vi, what: str):
    """An empty TensorArray for a scan output declared by body output ``vi``."""
    tf = _tf()
    elem, dims = _declared(vi)
    if not elem:
        expected, dims2 = node.graph.converter.expected(vi.name)
        elem, dims = expected, dims if dims is not None else dims2
    if not elem:
        node.refuse(f"{what} {vi.name!r} has no declared element type",
                    "run ONNX shape inference on the model")
    return tf.TensorArray(dtypes.tf_dtype(elem), size=0, dynamic_size=True,
                          element_shape=None if dims is None else tf.TensorShape(dims))


def _stack(node, values, vi):
    """Scan output of an unrolled loop: the per-iteration values stacked on a new axis 0."""
    tf = _tf()
    if not values:
        elem, dims = _declared(vi)
        if not elem or dims is None or any(d is None for d in dims):
            node.refuse(f"scan output {vi.name!r} of a zero-iteration loop has no static "
                        "declared shape", "declare the body output's shape")
        return np.zeros([0] + dims, dtypes.np_dtype(elem))
    if all(is_const(v) for v in values):
        return np.stack(values)
    return tf.stack([_tensor(node, v) for v in values])


def check_carried(node, initial, new, names) -> None:
    for name, a, b in zip(names, initial, new, strict=True):
        da = a.dtype if is_const(a) else a.dtype.as_numpy_dtype
        db = b.dtype if is_const(b) else b.dtype.as_numpy_dtype
        if np.dtype(da) != np.dtype(db):
            node.refuse(f"loop-carried {name!r} enters as {np.dtype(da)} and leaves the body "
                        f"as {np.dtype(db)}", "keep loop-carried values' dtype")


@op("Loop", attrs={"body": REQUIRED})
def loop(node):
    tf = _tf()
    body = node.subgraph("body")
    n_carried = len(node.proto.input) - 2
    n_scan = len(body.output) - 1 - n_carried
    if n_carried < 0 or n_scan < 0 or len(body.input) != n_carried + 2:
        node.refuse(f"the body has {len(body.input)} inputs and {len(body.output)} outputs "
                    f"for {n_carried} loop-carried values")
    if not node.has(0) and not node.has(1):
        node.refuse("a Loop with neither trip count M nor condition never ends",
                    "give the loop a trip count or a condition")
    carried = [node.value(2 + k) for k in range(n_carried)]
    if any(v is None for v in carried):
        node.refuse("a loop-carried input is missing")
    names = [vi.name for vi in body.input[2:]]
    trips = node.maybe_const(0)
    cond0 = node.maybe_const(1)
    # An absent cond input means the body's condition output is ignored (spec table).
    use_cond = node.has(1)
    if (trips is not None and trips.size == 1 and int(trips.reshape(())) <= UNROLL_MAX_TRIPS
            and (not use_cond or cond0 is not None)):
        result = _unroll_loop(node, int(trips.reshape(())), cond0, use_cond, carried, names,
                              n_scan)
        if result is not None:
            return result

    max_trips = _scalar(node, node.value(0), tf.int64, "M") if node.has(0) else None
    cond_init = _scalar(node, node.value(1), tf.bool, "cond") if use_cond else tf.constant(True)
    carried_t = [_tensor(node, v) for v in carried]
    arrays = [scan_array(node, vi, "scan output") for vi in body.output[1 + n_carried:]]

    def cond_fn(i, cond, *rest):
        if max_trips is None:
            return cond
        return tf.logical_and(cond, i < max_trips)

    def body_fn(i, cond, *rest):
        values, tas = list(rest[:n_carried]), list(rest[n_carried:])
        outs = run_body(node, "body", [i, cond] + values)
        new = [_tensor(node, o) for o in outs[1:1 + n_carried]]
        check_carried(node, values, new, names)
        next_cond = _scalar(node, outs[0], tf.bool, "the body's condition") if use_cond \
            else cond
        index = tf.cast(i, tf.int32)
        tas = [ta.write(index, _tensor(node, o)) for ta, o in zip(tas, outs[1 + n_carried:],
                                                                  strict=True)]
        return [i + 1, next_cond] + new + tas

    invariants = [tf.TensorShape([]), tf.TensorShape([])]
    invariants += [_invariant(vi, t) for vi, t in zip(body.input[2:], carried_t, strict=True)]
    invariants += [None] * n_scan  # TensorArrays: their own spec
    loop_vars = [tf.constant(0, tf.int64), cond_init] + carried_t + arrays
    out = _while(node, cond_fn, body_fn, loop_vars, invariants)
    finals = list(out[2:2 + n_carried])
    scans = [ta.stack() for ta in out[2 + n_carried:]]
    return finals + scans


def _unroll_loop(node, trips, cond0, use_cond, carried, names, n_scan) -> Optional[list]:
    """The loop unrolled in the trace, or None when a condition turns out to be computed at
    run time (the caller then builds a tf.while_loop)."""
    body = node.subgraph("body")
    n_carried = len(carried)
    cond = True if not use_cond else bool(np.asarray(cond0).reshape(()))
    values = list(carried)
    scans: List[list] = [[] for _ in range(n_scan)]
    i = 0
    while i < trips and cond:
        outs = run_body(node, "body", [np.array(i, np.int64), np.array(cond)] + values)
        new = outs[1:1 + n_carried]
        check_carried(node, values, new, names)
        values = new
        for k in range(n_scan):
            scans[k].append(outs[1 + n_carried + k])
        if use_cond:
            static = outs[0] if is_const(outs[0]) else _tf().get_static_value(outs[0])
            if static is None:
                return None
            if np.asarray(static).size != 1:
                node.refuse("the body's condition output must have one element")
            cond = bool(np.asarray(static).reshape(()))
        i += 1
    return values + [_stack(node, s, vi) for s, vi in zip(
        scans, body.output[1 + n_carried:], strict=True)]
