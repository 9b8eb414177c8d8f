"""ONNX control flow, random and (de)quantize ops in ONNX semantics.

See to_tf/core.py for the handler contract. Control flow:

- ``If`` picks its branch at conversion time when the condition is a constant,
  else builds ``tf.cond`` (both branches traced, their outputs must agree in
  dtype and rank).
- ``Loop`` and ``Scan`` become ``tf.while_loop`` whose body interprets the ONNX
  body graph on the loop variables; scan outputs accumulate in TensorArrays.
  A loop with a small constant trip count (and a constant condition) is
  unrolled instead, so its values fold and keep static shapes.

Random ops are registered with ``fold=False``: they draw at serving time.
Sequence, optional, string and the other quantized ops are not registered:
core refuses them by name (:data:`OP_FIXES` holds the fixes to show).

Size: an op table; If/Loop/Scan share the sub-graph interpreter glue, and the
random and (de)quantize ops are small handlers beside them.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from tfx_bridge.onnx_tf import core
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


def _run_body(node, attr: str, inputs: Sequence[Any]) -> List[Any]:
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
    proto = run.producer(name)
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
        return _run_body(node, "then_branch" if bool(cond.reshape(())) else "else_branch", [])
    pred = _scalar(node, node.value(0), tf.bool, "the condition")
    traced = {}

    def branch(attr: str, other: str) -> Callable[[], list]:
        def fn():
            outs = [_tensor(node, o) for o in _run_body(node, attr, [])]
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


def _scan_array(node, vi, what: str):
    """An empty TensorArray for a scan output declared by body output ``vi``."""
    tf = _tf()
    elem, dims = _declared(vi)
    if not elem:
        expected, dims2 = node.graph.converter.expected(vi.name)
        elem, dims = expected, dims if dims is not None else dims2
    if not elem:
        node.refuse(f"{what} {vi.name!r} has no declared element type",
                    "run ONNX shape inference on the model")
    return tf.TensorArray(core.tf_dtype(elem), size=0, dynamic_size=True,
                          element_shape=None if dims is None else tf.TensorShape(dims))


def _stack(node, values, vi):
    """Scan output of an unrolled loop: the per-iteration values stacked on a new axis 0."""
    tf = _tf()
    if not values:
        elem, dims = _declared(vi)
        if not elem or dims is None or any(d is None for d in dims):
            node.refuse(f"scan output {vi.name!r} of a zero-iteration loop has no static "
                        "declared shape", "declare the body output's shape")
        return np.zeros([0] + dims, core.np_dtype(elem))
    if all(is_const(v) for v in values):
        return np.stack(values)
    return tf.stack([_tensor(node, v) for v in values])


def _check_carried(node, initial, new, names) -> None:
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
    arrays = [_scan_array(node, vi, "scan output") for vi in body.output[1 + n_carried:]]

    def cond_fn(i, cond, *rest):
        if max_trips is None:
            return cond
        return tf.logical_and(cond, i < max_trips)

    def body_fn(i, cond, *rest):
        values, tas = list(rest[:n_carried]), list(rest[n_carried:])
        outs = _run_body(node, "body", [i, cond] + values)
        new = [_tensor(node, o) for o in outs[1:1 + n_carried]]
        _check_carried(node, values, new, names)
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
        outs = _run_body(node, "body", [np.array(i, np.int64), np.array(cond)] + values)
        new = outs[1:1 + n_carried]
        _check_carried(node, values, new, names)
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


# --------------------------------------------------------------------------- Scan


def _scan_check(info) -> Optional[str]:
    for name in ("scan_input_directions", "scan_output_directions", "directions"):
        if any(d not in (0, 1) for d in info.attrs.get(name) or []):
            return f"{name} {info.attrs[name]} (ONNX allows 0 and 1)"
    return None


def _moveaxis(tensor, source: int, dest: int):
    tf = _tf()
    rank = tensor.shape.rank
    if source == dest:
        return tensor
    perm = [d for d in range(rank) if d != source]
    perm.insert(dest, source)
    return tf.transpose(tensor, perm) if not is_const(tensor) else np.transpose(tensor, perm)


def _scan_core(node, states, scans, in_axes, in_dirs, out_axes, out_dirs) -> list:
    """Scan (opset 9+) over ``scans`` (tensors or numpy) with per-input axes/directions."""
    tf = _tf()
    body = node.subgraph("body")
    n_states, n_scan_in = len(states), len(scans)
    n_out = len(body.output) - n_states
    if len(body.input) != n_states + n_scan_in or n_out < 0:
        node.refuse(f"the body has {len(body.input)} inputs and {len(body.output)} outputs for "
                    f"{n_states} states and {n_scan_in} scan inputs")
    ranks = [np.ndim(s) if is_const(s) else s.shape.rank for s in scans]
    if any(r is None for r in ranks):
        node.refuse("a scan input has an unknown rank")
    axes = [a + r if a < 0 else a for a, r in zip(in_axes, ranks, strict=True)]
    if any(not 0 <= a < r for a, r in zip(axes, ranks, strict=True)):
        node.refuse(f"scan_input_axes {in_axes} out of range for ranks {ranks}")
    lengths = [s.shape[a] for s, a in zip(scans, axes, strict=True)]
    if len({v for v in lengths if v is not None}) > 1:
        node.refuse(f"scan inputs have different lengths {lengths} on their scan axes")
    static_len = lengths[0] if all(v is not None for v in lengths) else None
    names = [vi.name for vi in body.input[:n_states]]
    out_vis = body.output[n_states:]

    def element(x, axis, reverse, i, length):
        index = (length - 1 - i) if reverse else i
        if is_const(x) and isinstance(index, int):
            return np.take(x, index, axis=axis)
        return tf.gather(_tensor(node, x), index, axis=axis)

    if static_len is not None and static_len <= UNROLL_MAX_TRIPS:
        values = list(states)
        collected: List[list] = [[] for _ in range(n_out)]
        for i in range(static_len):
            elems = [element(x, a, d == 1, i, static_len)
                     for x, a, d in zip(scans, axes, in_dirs, strict=True)]
            outs = _run_body(node, "body", values + elems)
            _check_carried(node, values, outs[:n_states], names)
            values = outs[:n_states]
            for k in range(n_out):
                collected[k].append(outs[n_states + k])
        stacked = [_stack(node, c, vi) for c, vi in zip(collected, out_vis, strict=True)]
    else:
        scans_t = [_tensor(node, x) for x in scans]
        length = tf.shape(scans_t[0], out_type=tf.int32)[axes[0]] if static_len is None \
            else tf.constant(static_len, tf.int32)
        arrays = [_scan_array(node, vi, "scan output") for vi in out_vis]
        states_t = [_tensor(node, v) for v in states]

        def cond_fn(i, *rest):
            return i < length

        def body_fn(i, *rest):
            values, tas = list(rest[:n_states]), list(rest[n_states:])
            elems = [element(x, a, d == 1, i, length)
                     for x, a, d in zip(scans_t, axes, in_dirs, strict=True)]
            outs = _run_body(node, "body", values + elems)
            new = [_tensor(node, o) for o in outs[:n_states]]
            _check_carried(node, values, new, names)
            tas = [ta.write(i, _tensor(node, o)) for ta, o in zip(tas, outs[n_states:],
                                                                  strict=True)]
            return [i + 1] + new + tas

        invariants = [tf.TensorShape([])] + [
            _invariant(vi, t) for vi, t in zip(body.input[:n_states], states_t, strict=True)]
        out = _while(node, cond_fn, body_fn, [tf.constant(0, tf.int32)] + states_t + arrays,
                     invariants + [None] * len(arrays))
        values = list(out[1:1 + n_states])
        stacked = [ta.stack() for ta in out[1 + n_states:]]

    results = []
    for k, value in enumerate(stacked):
        if out_dirs[k] == 1:  # prepended: the last iteration's value comes first
            value = value[::-1] if is_const(value) else tf.reverse(value, [0])
        rank = np.ndim(value) if is_const(value) else value.shape.rank
        axis = out_axes[k] + rank if out_axes[k] < 0 else out_axes[k]
        if not 0 <= axis < rank:
            node.refuse(f"scan_output_axes {out_axes} out of range for rank {rank}")
        results.append(_moveaxis(value, 0, axis))
    return values + results


def _flags(value, count: int) -> List[int]:
    flags = list(value or [])
    if len(flags) > count:
        raise Unsupported(f"{len(flags)} flags given for {count} values")
    return flags + [0] * (count - len(flags))


@op("Scan", attrs={"body": REQUIRED, "num_scan_inputs": REQUIRED, "directions": None,
                   "scan_input_axes": None, "scan_input_directions": None,
                   "scan_output_axes": None, "scan_output_directions": None},
    check=_scan_check, since=8)
def scan(node):
    body = node.subgraph("body")
    m = node.attr("num_scan_inputs")
    if node.opset < 9:
        return _scan8(node, body, m)
    inputs = [node.value(i) for i in range(node.n)]
    n_states = len(inputs) - m
    if n_states < 0 or any(v is None for v in inputs):
        node.refuse(f"num_scan_inputs {m} does not fit {len(inputs)} inputs")
    n_out = len(body.output) - n_states
    return _scan_core(node, inputs[:n_states], inputs[n_states:],
                      _flags(node.attr("scan_input_axes"), m),
                      _flags(node.attr("scan_input_directions"), m),
                      _flags(node.attr("scan_output_axes"), n_out),
                      _flags(node.attr("scan_output_directions"), n_out))


def _scan8(node, body, m):
    """Scan-8: a batch axis 0 on every state and scan input, the sequence on axis 1; run
    per batch element over a static batch size."""
    tf = _tf()
    inputs = [node.value(i) for i in range(1, node.n)]
    n_states = len(inputs) - m
    if n_states < 0 or any(v is None for v in inputs):
        node.refuse(f"num_scan_inputs {m} does not fit {len(inputs)} inputs")
    shapes = [list(v.shape) if is_const(v) else v.shape.as_list() for v in inputs]
    batch = shapes[0][0] if shapes and shapes[0] else None
    if batch is None or any(not s or s[0] != batch for s in shapes):
        node.refuse(f"Scan-8 with a dynamic or inconsistent batch dimension ({shapes})",
                    "export at opset >= 9")
    if node.has(0):
        lens = node.const(0, "sequence_lens")
        full = [s[1] for s in shapes[n_states:]]
        if any(f is None or np.any(lens != f) for f in full):
            node.refuse("Scan-8 with sequence_lens shorter than the sequence",
                        "export at opset >= 9 (no sequence_lens)")
    n_out = len(body.output) - n_states
    dirs = _flags(node.attr("directions"), m)
    per_batch = []
    for b in range(batch):
        take = [v[b] if is_const(v) else tf.gather(v, b) for v in inputs]
        per_batch.append(_scan_core(node, take[:n_states], take[n_states:], [0] * m, dirs,
                                    [0] * n_out, [0] * n_out))
    outs = []
    for k in range(len(per_batch[0])):
        column = [r[k] for r in per_batch]
        outs.append(np.stack(column) if all(is_const(c) for c in column)
                    else tf.stack([_tensor(node, c) for c in column]))
    return outs


# --------------------------------------------------------------------------- random

_FLOAT_TYPES = {1: "float32", 10: "float16", 11: "float64"}


def _type_name(elem: int) -> str:
    import onnx
    return onnx.TensorProto.DataType.Name(elem)


def _random_check(info) -> Optional[str]:
    dtype = info.attrs.get("dtype")
    first = info.input_types[0] if info.input_types else None
    if info.op_type in ("Bernoulli", "Multinomial") and first not in (None, *_FLOAT_TYPES):
        return f"input of type {_type_name(first)} (ONNX needs float16/float32/float64)"
    if info.op_type == "Multinomial":
        return None if dtype in (6, 7) else f"dtype {dtype} (ONNX allows INT32/INT64)"
    if info.op_type == "Bernoulli":
        return None
    if dtype is None and info.op_type.endswith("Like"):
        dtype = first  # the output takes the input's type
    if dtype is not None and dtype not in _FLOAT_TYPES:
        return f"dtype {_type_name(dtype)} (a random draw needs float16/float32/float64)"
    return None


def _seed(node) -> Optional[int]:
    seed = node.attr("seed")
    return None if seed is None else int(seed)


def _like_dtype(node):
    tf = _tf()
    dtype = node.attr("dtype")
    out = core.tf_dtype(dtype) if dtype is not None else node.dtype(0)
    if out not in (tf.float16, tf.float32, tf.float64):
        node.refuse(f"output dtype {out.name} (a random draw needs float16/float32/float64)")
    return out


@op("RandomNormal", attrs={"dtype": 1, "mean": 0.0, "scale": 1.0, "seed": None,
                           "shape": REQUIRED}, check=_random_check, fold=False)
def random_normal(node):
    tf = _tf()
    return tf.random.normal(list(node.attr("shape")), node.attr("mean"), node.attr("scale"),
                            dtype=core.tf_dtype(node.attr("dtype")), seed=_seed(node))


@op("RandomUniform", attrs={"dtype": 1, "low": 0.0, "high": 1.0, "seed": None,
                            "shape": REQUIRED}, check=_random_check, fold=False)
def random_uniform(node):
    tf = _tf()
    return tf.random.uniform(list(node.attr("shape")), node.attr("low"), node.attr("high"),
                             dtype=core.tf_dtype(node.attr("dtype")), seed=_seed(node))


@op("RandomNormalLike", attrs={"dtype": None, "mean": 0.0, "scale": 1.0, "seed": None},
    check=_random_check, fold=False)
def random_normal_like(node):
    tf = _tf()
    return tf.random.normal(node.dyn_shape(0), node.attr("mean"), node.attr("scale"),
                            dtype=_like_dtype(node), seed=_seed(node))


@op("RandomUniformLike", attrs={"dtype": None, "low": 0.0, "high": 1.0, "seed": None},
    check=_random_check, fold=False)
def random_uniform_like(node):
    tf = _tf()
    return tf.random.uniform(node.dyn_shape(0), node.attr("low"), node.attr("high"),
                             dtype=_like_dtype(node), seed=_seed(node))


@op("Bernoulli", attrs={"dtype": None, "seed": None}, check=_random_check, fold=False,
    since=15)
def bernoulli(node):
    tf = _tf()
    p = node.t(0)
    if p.dtype not in (tf.float16, tf.float32, tf.float64):
        node.refuse(f"input of dtype {p.dtype.name}")
    dtype = core.tf_dtype(node.attr("dtype")) if node.attr("dtype") is not None else p.dtype
    draw = tf.random.uniform(node.dyn_shape(0), dtype=p.dtype, seed=_seed(node))
    return tf.cast(draw < p, dtype)


@op("Multinomial", attrs={"dtype": 6, "sample_size": 1, "seed": None}, check=_random_check,
    fold=False, since=7)
def multinomial(node):
    tf = _tf()
    if node.rank(0) != 2:
        node.refuse(f"input of rank {node.rank(0)} (ONNX needs [batch, classes])")
    return tf.random.categorical(node.t(0), int(node.attr("sample_size")),
                                 dtype=core.tf_dtype(node.attr("dtype")), seed=_seed(node))


# --------------------------------------------------------------------------- quantize

_QUANT_RANGES = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767)}
_QUANT_ELEMS = {"uint8": 2, "int8": 3, "uint16": 4, "int16": 5}
_QUANT_NAMES = "int8/uint8/int16/uint16"


def _broadcast_param(node, value, x, axis: int, block_size: int):
    """A scale/zero point shaped to broadcast against ``x`` (ONNX's reshape_input): scalar,
    per-axis (1-D along ``axis``) or blocked (repeated ``block_size`` times along ``axis``)."""
    tf = _tf()
    rank = x.shape.rank
    shape = value.shape if is_const(value) else value.shape.as_list()
    if len(shape) == 0:
        return _tensor(node, value)
    if len(shape) > 0 and np.prod([d if d is not None else 2 for d in shape]) == 1:
        return tf.reshape(_tensor(node, value), [])
    if not block_size:
        if len(shape) != 1:
            node.refuse(f"a scale/zero point of shape {list(shape)} without block_size "
                        "(ONNX needs a scalar or 1-D)")
        dims = [1] * rank
        dims[axis] = -1
        return tf.reshape(_tensor(node, value), dims)
    if len(shape) != rank:
        node.refuse(f"blocked quantization with a scale of rank {len(shape)} for input rank "
                    f"{rank}")
    repeated = tf.repeat(_tensor(node, value), block_size, axis=axis)
    return tf.gather(repeated, tf.range(tf.shape(x)[axis]), axis=axis)


def _quant_axis(node, x) -> int:
    axis = int(node.attr("axis", 1))
    rank = x.shape.rank
    return axis + rank if axis < 0 else axis


def _quant_check(info) -> Optional[str]:
    if info.op_type == "QuantizeLinear":
        out = info.attrs.get("output_dtype") or 0
        if out and out not in _QUANT_RANGES:
            return f"output_dtype {out} (supported: {_QUANT_NAMES})"
    return None


@op("QuantizeLinear", attrs={"axis": 1, "saturate": 1, "block_size": 0, "output_dtype": 0},
    check=_quant_check, since=10)
def quantize_linear(node):
    tf = _tf()
    x = node.t(0)
    if node.has(2):
        elem = _QUANT_ELEMS.get(node.dtype(2).name)
    else:
        elem = node.attr("output_dtype") or 2
    if elem not in _QUANT_RANGES:
        node.refuse(f"output type {node.dtype(2).name if node.has(2) else elem} "
                    f"(supported: {_QUANT_NAMES})", "quantize to 8- or 16-bit integers")
    if x.dtype not in (tf.float32, tf.float16, tf.int32):
        node.refuse(f"input of dtype {x.dtype.name}")
    axis = _quant_axis(node, x)
    block = int(node.attr("block_size") or 0)
    scale = _broadcast_param(node, node.value(1), x, axis, block)
    # numpy's promotion, as ONNX's reference divides (int32 / float32 -> float64)
    compute = tf.as_dtype(np.result_type(x.dtype.as_numpy_dtype, scale.dtype.as_numpy_dtype))
    scaled = tf.cast(x, compute) / tf.cast(scale, compute)
    rounded = tf.cast(tf.round(scaled), tf.float64)  # round half to even, as np.rint
    if node.has(2):
        zero = _broadcast_param(node, node.value(2), x, axis, block)
        rounded = rounded + tf.cast(zero, tf.float64)
    low, high = _QUANT_RANGES[elem]
    return tf.cast(tf.clip_by_value(rounded, low, high), core.tf_dtype(elem))


@op("DequantizeLinear", attrs={"axis": 1, "block_size": 0}, since=10)
def dequantize_linear(node):
    tf = _tf()
    x = node.t(0)
    if x.dtype not in (tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32):
        node.refuse(f"input of dtype {x.dtype.name} (supported: {_QUANT_NAMES}/int32)",
                    "dequantize 8- or 16-bit integers")
    axis = _quant_axis(node, x)
    block = int(node.attr("block_size") or 0)
    scale = _broadcast_param(node, node.value(1), x, axis, block)
    if scale.dtype not in (tf.float32, tf.float16):
        node.refuse(f"scale of dtype {scale.dtype.name}")
    # ONNX's reference: x as float32 minus the zero point, times the scale (numpy promotion:
    # int32 zero points promote to float64), then the scale's dtype.
    compute = tf.float64 if (x.dtype == tf.int32 and node.has(2)) else tf.float32
    dx = tf.cast(x, compute)
    if node.has(2):
        if node.dtype(2) != x.dtype:
            node.refuse(f"zero point of dtype {node.dtype(2).name} for input {x.dtype.name}")
        dx = dx - tf.cast(_broadcast_param(node, node.value(2), x, axis, block), compute)
    return tf.cast(dx * tf.cast(scale, compute), scale.dtype)


@op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(node):
    tf = _tf()
    x = node.t(0)
    if x.dtype != tf.float32:
        node.refuse(f"input of dtype {x.dtype.name} (ONNX allows float32)")
    # ONNX's reference, step by step in float32: the range always includes 0.
    maxx = tf.maximum(0.0, tf.reduce_max(x))
    minx = tf.minimum(0.0, tf.reduce_min(x))
    span = tf.where(tf.equal(maxx, minx), tf.constant(1.0), maxx - minx)
    scale = span / 255.0
    zero = tf.round(tf.clip_by_value(0.0 - minx / scale, 0.0, 255.0))
    y = tf.clip_by_value(tf.round(x / scale) + zero, 0.0, 255.0)
    return [tf.cast(y, tf.uint8), scale, tf.cast(zero, tf.uint8)]
