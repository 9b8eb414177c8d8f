"""ONNX linalg ops in ONNX semantics (see to_tf/core.py for the handler contract).

MatMul, Gemm, Einsum, Det, the Reduce* family, Softmax/LogSoftmax/Hardmax and the
recurrent ops LSTM/GRU/RNN. Integer dtypes that TF's CPU kernels lack for an op are
computed in int64 and cast back, which is exact for wrapping integer arithmetic;
quantized matmuls are refused by name.

Size: an op table (about 25 ONNX ops, each a short self-contained handler);
the recurrent ops share the gate helpers with MatMul/Gemm's dtype handling.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np

from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import REQUIRED, op


def _normalize_axis(node, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        node.refuse(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


# --------------------------------------------------------------------------- integer helpers

_NATIVE_MATMUL = ("float16", "float32", "float64", "int32", "int64")
_WIDEN = ("int8", "uint8", "int16", "uint16", "uint32")


def _in_native_dtype(node, fn: Callable, xs: Sequence, dtype):
    """fn(*xs) where TF has the kernel; integers it lacks go through int64 (exact modulo
    2**bits, like ONNX's wrapping integer arithmetic)."""
    tf = _tf()
    if dtype.name in _NATIVE_MATMUL:
        return fn(*xs)
    if dtype.name == "uint64":
        return tf.bitcast(fn(*[tf.bitcast(x, tf.int64) for x in xs]), tf.uint64)
    if dtype.name in _WIDEN:
        return tf.cast(fn(*[tf.cast(x, tf.int64) for x in xs]), dtype)
    node.refuse(f"input dtype {dtype.name} is not supported",
                "use float16/float32/float64 or an integer type")


# --------------------------------------------------------------------------- MatMul, Gemm


@op("MatMul")
def matmul(node):
    tf = _tf()
    ra, rb = node.rank(0), node.rank(1)
    if ra == 0 or rb == 0:
        node.refuse("a scalar MatMul operand", "MatMul needs operands of rank >= 1")
    a, b = node.t(0), node.t(1)
    # numpy semantics: a 1-D operand gets a unit dim that is removed afterwards
    if ra == 1:
        a = tf.expand_dims(a, 0)
    if rb == 1:
        b = tf.expand_dims(b, 1)
    y = _in_native_dtype(node, tf.linalg.matmul, (a, b), node.dtype(0))
    squeeze = ([-2] if ra == 1 else []) + ([-1] if rb == 1 else [])
    return tf.squeeze(y, squeeze) if squeeze else y


@op("Gemm", attrs={"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0, "broadcast": 0})
def gemm(node):
    tf = _tf()
    if node.rank(0) != 2 or node.rank(1) != 2:
        node.refuse(f"Gemm operands of rank {node.rank(0)} and {node.rank(1)}",
                    "Gemm takes 2-D A and B")
    dtype = node.dtype(0)
    alpha, beta = float(node.attr("alpha")), float(node.attr("beta"))
    if not dtype.is_floating and (alpha != 1.0 or beta not in (0.0, 1.0)):
        node.refuse(f"integer ({dtype.name}) Gemm with alpha={alpha}, beta={beta}",
                    "scale in float or use alpha=1, beta=1")
    ta, tb = bool(node.attr("transA")), bool(node.attr("transB"))

    def mm(x, w):
        return tf.linalg.matmul(x, w, transpose_a=ta, transpose_b=tb)

    y = _in_native_dtype(node, mm, (node.t(0), node.t(1)), dtype)
    if alpha != 1.0:
        y = y * tf.constant(alpha, dtype)
    if node.has(2) and beta != 0.0:
        c = node.t(2)
        if beta != 1.0:
            c = c * tf.constant(beta, dtype)
        y = y + c
    return y


# --------------------------------------------------------------------------- Einsum


def _einsum_equation(node, equation: str, n_inputs: int) -> str:
    """The explicit form ``lhs->rhs`` of an ONNX equation (implicit output: the letters
    seen once, sorted, after the ellipsis)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs:
        node.refuse(f"equation {equation!r} has {len(terms)} operands for {n_inputs} inputs")
    for term in terms + ([rhs] if arrow else []):
        body = term.replace("...", "", 1)
        if not all(ch.isalpha() for ch in body):
            node.refuse(f"equation {equation!r}: term {term!r} is not letters with at most "
                        "one ellipsis")
    if not arrow:
        letters = "".join(t.replace("...", "") for t in terms)
        once = sorted(ch for ch in set(letters) if letters.count(ch) == 1)
        rhs = ("..." if any("..." in t for t in terms) else "") + "".join(once)
    out = rhs.replace("...", "")
    if len(set(out)) != len(out):
        node.refuse(f"equation {equation!r} repeats a letter in its output")
    if not set(out) <= set(lhs):
        node.refuse(f"equation {equation!r} has output letters no input has")
    return ",".join(terms) + "->" + rhs


@op("Einsum", attrs={"equation": REQUIRED}, since=12)
def einsum(node):
    tf = _tf()
    equation = _einsum_equation(node, node.attr("equation"), node.n)
    xs = [node.t(i) for i in range(node.n)]

    def fn(*args):
        return tf.einsum(equation, *args)

    try:
        return _in_native_dtype(node, fn, xs, node.dtype(0))
    except (ValueError, tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        node.refuse(f"equation {node.attr('equation')!r} is not supported by tf.einsum "
                    f"({first})", "rewrite it as MatMul/Transpose/ReduceSum")


# --------------------------------------------------------------------------- Det


@op("Det", since=11)
def det(node):
    tf = _tf()
    shape = node.shape(0)
    if len(shape) < 2:
        node.refuse(f"Det of a rank-{len(shape)} input", "Det takes [..., M, M]")
    x = node.t(0)
    if node.dtype(0) == tf.float16:  # no half kernel: float32 rounded once to half
        return tf.cast(tf.linalg.det(tf.cast(x, tf.float32)), tf.float16)
    return tf.linalg.det(x)


# --------------------------------------------------------------------------- quantized

def _quantized(info) -> str:
    return (f"{info.op_type} is a quantized (integer) matmul, which this converter does not "
            "implement; export the float model (no quantization)")


@op("MatMulInteger", check=_quantized, since=10)
def matmul_integer(node):
    node.refuse(_quantized(node))


@op("QLinearMatMul", check=_quantized, since=10)
def qlinear_matmul(node):
    node.refuse(_quantized(node))


# --------------------------------------------------------------------------- reductions

# The opset at which ``axes`` moved from an attribute to an input.
_AXES_INPUT_SINCE = {"ReduceSum": 13}
_REDUCE_ATTRS = {"axes": None, "keepdims": 1, "noop_with_empty_axes": 0}


def _reduce_check(info) -> Optional[str]:
    if info.attrs.get("keepdims") not in (0, 1):
        return f"keepdims={info.attrs.get('keepdims')} (must be 0 or 1)"
    return None


def _reduce_axes(node):
    """The reduced axes: a sorted list, an int32 tensor (run-time axes), ("dynamic-noop",
    tensor) or "noop" (noop_with_empty_axes and no axes)."""
    tf = _tf()
    rank = node.rank(0)
    noop = bool(node.attr("noop_with_empty_axes"))
    axes = node.attr("axes")
    if axes is not None:
        axes = np.asarray(axes, np.int64).reshape(-1)
    elif node.has(1):
        axes = node.maybe_const(1)
        if axes is None:
            axes_t = tf.cast(tf.reshape(node.t(1), [-1]), tf.int32)
            length = axes_t.shape[0]
            if length is None:  # empty only known at run time
                everything = tf.range(rank, dtype=tf.int32)
                if noop:
                    return ("dynamic-noop", axes_t)
                return tf.cond(tf.size(axes_t) > 0, lambda: axes_t, lambda: everything)
            if length > 0:
                return axes_t
            axes = np.zeros([0], np.int64)
        axes = np.asarray(axes, np.int64).reshape(-1)
    else:
        axes = np.zeros([0], np.int64)
    if axes.size == 0:
        return "noop" if noop else list(range(rank))
    normalized = sorted(_normalize_axis(node, int(a), rank, "axes value") for a in axes)
    if len(set(normalized)) != len(normalized):
        node.refuse(f"axes {axes.tolist()} repeat an axis")
    return normalized


def _reduce(node, fn: Callable, keep: bool, axes):
    """fn(x, axes, keepdims) for static or run-time axes."""
    tf = _tf()
    x = node.t(0)
    if isinstance(axes, tuple):  # ("dynamic-noop", axes tensor): identity when empty
        axes_t = axes[1]
        return tf.cond(tf.size(axes_t) > 0, lambda: fn(x, axes_t, keep), lambda: x)
    return fn(x, axes, keep)


def _float_compute(dtype, fn: Callable) -> Callable:
    """fn computed in float64 for integer inputs, cast back (ONNX's reference: numpy in
    float64, then astype, which truncates)."""
    tf = _tf()
    if dtype.is_floating:
        return fn

    def wrapped(x, axes, keep):
        return tf.cast(fn(tf.cast(x, tf.float64), axes, keep), dtype)
    return wrapped


def _reducer(kind: str, dtype) -> Callable:
    tf = _tf()
    if dtype == tf.bool:
        if kind == "ReduceMax":
            return tf.reduce_any
        if kind == "ReduceMin":
            return tf.reduce_all
        return None
    if kind == "ReduceSum":
        return tf.reduce_sum
    if kind == "ReduceMean":
        return tf.reduce_mean
    if kind == "ReduceMax":
        return tf.reduce_max
    if kind == "ReduceMin":
        return tf.reduce_min
    if kind == "ReduceProd":
        return tf.reduce_prod
    if kind == "ReduceSumSquare":
        return lambda x, axes, keep: tf.reduce_sum(x * x, axes, keep)
    if kind == "ReduceL1":
        if dtype.is_unsigned:
            return tf.reduce_sum
        return lambda x, axes, keep: tf.reduce_sum(tf.abs(x), axes, keep)
    if kind == "ReduceL2":
        return _float_compute(dtype, lambda x, axes, keep: tf.sqrt(
            tf.reduce_sum(x * x, axes, keep)))
    if kind == "ReduceLogSum":
        return _float_compute(dtype, lambda x, axes, keep: tf.math.log(
            tf.reduce_sum(x, axes, keep)))
    if kind == "ReduceLogSumExp":
        return _float_compute(dtype, tf.math.reduce_logsumexp)
    raise AssertionError(kind)


def _make_reduce(kind: str):
    def handler(node):
        tf = _tf()
        dtype = node.dtype(0)
        if dtype == tf.bool and kind not in ("ReduceMax", "ReduceMin"):
            node.refuse(f"{kind} of a bool tensor", "cast it to an integer type first")
        if kind == "ReduceLogSumExp" and not dtype.is_floating:
            # integer rounding of the max-shifted sum is unspecified (ONNX Runtime's
            # opset-13 and opset-18 kernels disagree)
            node.refuse(f"ReduceLogSumExp of an integer ({dtype.name}) tensor",
                        "cast it to float first")
        if node.attr("axes") is not None and node.opset >= _AXES_INPUT_SINCE.get(kind, 18):
            node.refuse(f"the axes attribute at opset {node.opset} (axes is an input since "
                        f"opset {_AXES_INPUT_SINCE.get(kind, 18)})")
        keep = bool(node.attr("keepdims"))
        axes = _reduce_axes(node)
        if isinstance(axes, str):  # "noop": noop_with_empty_axes and no axes
            return node.value(0)
        return _reduce(node, _reducer(kind, dtype), keep, axes)
    handler.__name__ = kind
    return handler


for _kind in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"):
    op(_kind, attrs=dict(_REDUCE_ATTRS), check=_reduce_check)(_make_reduce(_kind))


# --------------------------------------------------------------------------- Softmax family


def _softmax_axes(node) -> List[int]:
    """The axes normalized over: opset < 13 coerces to 2-D at ``axis`` (every axis from it
    on), opset >= 13 uses the single axis."""
    rank = node.rank(0)
    default = -1 if node.opset >= 13 else 1
    axis = node.attr("axis")
    axis = default if axis is None else int(axis)
    if rank == 0:
        node.refuse(f"{node.op_type} of a scalar", "give it a rank >= 1 input")
    axis = _normalize_axis(node, axis, rank)
    return [axis] if node.opset >= 13 else list(range(axis, rank))


def _in_float32_if_half(fn: Callable, x):
    """fn(x); a float16 x computed in float32 and rounded once (as ONNX Runtime does)."""
    tf = _tf()
    if x.dtype == tf.float16:
        return tf.cast(fn(tf.cast(x, tf.float32)), tf.float16)
    return fn(x)


@op("Softmax", attrs={"axis": None})
def softmax(node):
    tf = _tf()
    axes = _softmax_axes(node)

    def fn(x):
        if len(axes) == 1:
            return tf.nn.softmax(x, axis=axes[0])
        e = tf.exp(x - tf.reduce_max(x, axes, keepdims=True))
        return e / tf.reduce_sum(e, axes, keepdims=True)
    return _in_float32_if_half(fn, node.t(0))


@op("LogSoftmax", attrs={"axis": None})
def log_softmax(node):
    tf = _tf()
    axes = _softmax_axes(node)

    def fn(x):
        if len(axes) == 1:
            return tf.nn.log_softmax(x, axis=axes[0])
        shifted = x - tf.reduce_max(x, axes, keepdims=True)
        return shifted - tf.math.log(tf.reduce_sum(tf.exp(shifted), axes, keepdims=True))
    return _in_float32_if_half(fn, node.t(0))


@op("Hardmax", attrs={"axis": None})
def hardmax(node):
    tf = _tf()
    axes = _softmax_axes(node)
    x = node.t(0)
    if len(axes) == 1:
        axis = axes[0]
        depth = tf.shape(x)[axis]
        return tf.one_hot(tf.argmax(x, axis), depth, axis=axis, dtype=x.dtype)
    # opset < 13: argmax over the flattened trailing axes
    shape = tf.shape(x)
    flat = tf.reshape(x, tf.concat([shape[:axes[0]], [-1]], 0))
    y = tf.one_hot(tf.argmax(flat, -1), tf.shape(flat)[-1], axis=-1, dtype=x.dtype)
    return tf.reshape(y, shape)


# --------------------------------------------------------------------------- LSTM, GRU, RNN

# name -> (uses alpha, uses beta, default alpha, default beta); None: no ONNX default
_ACTIVATIONS = {
    "relu": (False, False, None, None),
    "tanh": (False, False, None, None),
    "sigmoid": (False, False, None, None),
    "softsign": (False, False, None, None),
    "softplus": (False, False, None, None),
    "affine": (True, True, None, None),
    "leakyrelu": (True, False, 0.01, None),
    "thresholdedrelu": (True, False, 1.0, None),
    "scaledtanh": (True, True, None, None),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, None),
}
_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                        "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DIRECTIONS = ("forward", "reverse", "bidirectional", "foward")  # GRU-1's default: "foward"


def _activation_fn(name: str, alpha, beta) -> Callable:
    tf = _tf()
    if name == "relu":
        return tf.nn.relu
    if name == "tanh":
        return tf.tanh
    if name == "sigmoid":
        return tf.sigmoid
    if name == "softsign":
        return tf.nn.softsign
    if name == "softplus":
        return tf.math.softplus

    def c(v, x):
        return tf.constant(v, x.dtype)
    if name == "affine":
        return lambda x: c(alpha, x) * x + c(beta, x)
    if name == "leakyrelu":
        return lambda x: tf.where(x >= 0, x, c(alpha, x) * x)
    if name == "thresholdedrelu":
        return lambda x: tf.where(x > c(alpha, x), x, tf.zeros_like(x))
    if name == "scaledtanh":
        return lambda x: c(alpha, x) * tf.tanh(c(beta, x) * x)
    if name == "hardsigmoid":
        return lambda x: tf.clip_by_value(c(alpha, x) * x + c(beta, x), 0, 1)
    if name == "elu":
        return lambda x: tf.where(x >= 0, x, c(alpha, x) * (tf.exp(x) - 1))
    raise AssertionError(name)


def _activation_params(attrs, op_type: str):
    """[(name, alpha, beta)] for each direction's activations (k per direction), or a
    refusal string."""
    k = len(_DEFAULT_ACTIVATIONS[op_type])
    nd = 2 if attrs.get("direction") == "bidirectional" else 1
    names = attrs.get("activations")
    if not names:
        names = _DEFAULT_ACTIVATIONS[op_type] * nd
    names = [str(n).lower() for n in names]
    unknown = [n for n in names if n not in _ACTIVATIONS]
    if unknown:
        return f"activation(s) {unknown} are not ONNX recurrent activations"
    if op_type == "RNN" and nd == 1 and len(names) == 2:
        names = names[:1]  # RNN's schema default is [Tanh, Tanh] whatever the direction
    if len(names) != k * nd:
        return (f"{len(names)} activations given; {op_type} takes {k} per direction "
                f"({k * nd} here)")
    result = []
    for which, index in (("alpha", 0), ("beta", 1)):
        values = list(attrs.get(f"activation_{which}") or [])
        # The spec says the values are "consumed in the order of activation functions":
        # read positionally or by the activations that take them; refuse when they differ.
        positional, consumed, it = [], [], iter(values)
        for i, name in enumerate(names):
            uses, default = _ACTIVATIONS[name][index], _ACTIVATIONS[name][2 + index]
            if not uses:
                positional.append(None)
                consumed.append(None)
                continue
            positional.append(values[i] if i < len(values) else default)
            consumed.append(next(it, default))
        if positional != consumed:
            return (f"activation_{which} {values} is ambiguous for activations {names} "
                    "(positional vs. consumed by the activations that take it)")
        missing = [n for n, v in zip(names, positional, strict=True)
                   if _ACTIVATIONS[n][index] and v is None]
        if missing:
            return f"activation(s) {missing} need activation_{which}, which is not given"
        result.append(positional)
    return [(n, a, b) for n, a, b in zip(names, result[0], result[1], strict=True)]


def _rnn_check(info) -> Optional[str]:
    attrs = info.attrs
    if attrs.get("direction") not in _DIRECTIONS:
        return f"direction {attrs.get('direction')!r} (forward, reverse or bidirectional)"
    if attrs.get("layout") not in (0, 1):
        return f"layout={attrs.get('layout')} (must be 0 or 1)"
    if info.op_type == "LSTM" and attrs.get("input_forget") not in (0, 1):
        return f"input_forget={attrs.get('input_forget')} (must be 0 or 1)"
    params = _activation_params(attrs, info.op_type)
    return params if isinstance(params, str) else None


_RNN_ATTRS = {"activation_alpha": None, "activation_beta": None, "activations": None,
              "clip": None, "direction": "forward", "hidden_size": None, "layout": 0,
              "output_sequence": 0}


def _recurrent(node):
    """LSTM, GRU and RNN: per direction, the input projection for all steps at once, then
    a tf.while_loop over time (ragged sequence_lens by masking, as ONNX Runtime: states
    stop at each sequence's end and Y is zero past it)."""
    tf = _tf()
    kind = node.op_type
    gates = _GATES[kind]
    attrs = node.attrs
    params = _activation_params(attrs, kind)
    if isinstance(params, str):
        node.refuse(params)
    dtype = node.dtype(0)
    if not dtype.is_floating:
        node.refuse(f"{kind} input of dtype {dtype.name}", "use float16/float32/float64")
    bidirectional = attrs["direction"] == "bidirectional"
    nd = 2 if bidirectional else 1
    layout = int(attrs["layout"])
    if node.rank(0) != 3:
        node.refuse(f"X of rank {node.rank(0)}", "X is [seq, batch, input] (layout 0)")
    w_shape, r_shape = node.shape(1), node.shape(2)
    hidden = attrs.get("hidden_size") or r_shape[-1]
    if hidden is None or r_shape[-1] not in (None, hidden) or w_shape[0] not in (None, nd) \
            or w_shape[1] not in (None, gates * hidden) or r_shape[1] not in (None, gates * hidden):
        node.refuse(f"W {w_shape} / R {r_shape} do not match hidden_size={hidden} and "
                    f"{nd} direction(s)")
    hidden = int(hidden)
    clip = attrs.get("clip")
    k = len(_DEFAULT_ACTIVATIONS[kind])

    x = node.t(0)
    if layout == 1:
        x = tf.transpose(x, [1, 0, 2])  # -> [seq, batch, input]
    steps = tf.shape(x)[0]
    batch = tf.shape(x)[1]
    static_batch = x.shape[1]
    w, r = node.t(1), node.t(2)
    b = node.t(3) if node.has(3) else None

    # sequence_lens: masking unless every length is the (static) sequence length
    lens = None
    if node.has(4):
        static_lens = node.maybe_const(4)
        static_steps = x.shape[0]
        if not (static_lens is not None and static_steps is not None
                and np.all(static_lens == static_steps)):
            lens = tf.cast(node.t(4), tf.int32)

    def initial(i):
        if not node.has(i):
            return None
        state = node.t(i)
        return tf.transpose(state, [1, 0, 2]) if layout == 1 else state  # [nd, batch, H]

    h0_all, c0_all = initial(5), initial(6) if kind == "LSTM" else None
    p_all = node.t(7) if kind == "LSTM" and node.has(7) else None
    zeros = tf.zeros(tf.stack([batch, hidden]), dtype)

    ys, hs, cs = [], [], []
    for d in range(nd):
        reverse = attrs["direction"] == "reverse" or d == 1
        acts = [_activation_fn(*p) for p in params[d * k:(d + 1) * k]]
        xd = x
        if reverse:
            xd = (tf.reverse_sequence(x, lens, seq_axis=0, batch_axis=1) if lens is not None
                  else tf.reverse(x, [0]))
        wb = b[d, :gates * hidden] if b is not None else None
        rb = b[d, gates * hidden:] if b is not None else None
        # input projection of every step at once: [seq, batch, gates * H]
        xw = tf.linalg.matmul(xd, w[d], transpose_b=True)
        if wb is not None:
            xw = xw + wb
        rt = tf.transpose(r[d])  # [H, gates * H]
        h0 = h0_all[d] if h0_all is not None else zeros
        c0 = c0_all[d] if c0_all is not None else zeros
        peep = p_all[d] if p_all is not None else None
        step = _step_fn(kind, acts, rt, rb, peep, hidden, clip, attrs, dtype)
        y, h, c = _time_loop(step, xw, h0, c0, steps, lens, static_batch, hidden, dtype)
        if reverse:
            y = (tf.reverse_sequence(y, lens, seq_axis=0, batch_axis=1) if lens is not None
                 else tf.reverse(y, [0]))
        ys.append(y)
        hs.append(h)
        cs.append(c)
    y = tf.stack(ys, 1)  # [seq, nd, batch, H]
    y_h = tf.stack(hs, 0)  # [nd, batch, H]
    y_c = tf.stack(cs, 0)
    if layout == 1:
        y = tf.transpose(y, [2, 0, 1, 3])
        y_h = tf.transpose(y_h, [1, 0, 2])
        y_c = tf.transpose(y_c, [1, 0, 2])
    return [y, y_h, y_c] if kind == "LSTM" else [y, y_h]


def _step_fn(kind, acts, rt, rb, peep, hidden, clip, attrs, dtype):
    """One time step: (projected input x_t, h, c) -> (h, c)."""
    tf = _tf()

    def clipped(v):
        if clip is None:
            return v
        return tf.clip_by_value(v, tf.constant(-clip, dtype), tf.constant(clip, dtype))

    if kind == "RNN":
        f = acts[0]

        def rnn(xt, h, c):
            g = xt + tf.linalg.matmul(h, rt)
            if rb is not None:
                g = g + rb
            return f(clipped(g)), c
        return rnn

    if kind == "GRU":
        f, g = acts
        linear_before_reset = bool(attrs.get("linear_before_reset"))
        r_zr, r_h = rt[:, :2 * hidden], rt[:, 2 * hidden:]
        rb_zr = rb[:2 * hidden] if rb is not None else None
        rb_h = rb[2 * hidden:] if rb is not None else None

        def gru(xt, h, c):
            zr = xt[:, :2 * hidden] + tf.linalg.matmul(h, r_zr)
            if rb_zr is not None:
                zr = zr + rb_zr
            zr = f(clipped(zr))
            z, rr = zr[:, :hidden], zr[:, hidden:]
            if linear_before_reset:
                hr = tf.linalg.matmul(h, r_h)
                if rb_h is not None:
                    hr = hr + rb_h
                pre = xt[:, 2 * hidden:] + rr * hr
            else:
                pre = xt[:, 2 * hidden:] + tf.linalg.matmul(rr * h, r_h)
                if rb_h is not None:
                    pre = pre + rb_h
            cand = g(clipped(pre))
            return (1 - z) * cand + z * h, c
        return gru

    f, g, hact = acts
    input_forget = bool(attrs.get("input_forget"))
    p_i = peep[:hidden] if peep is not None else None
    p_o = peep[hidden:2 * hidden] if peep is not None else None
    p_f = peep[2 * hidden:] if peep is not None else None

    def lstm(xt, h, c):
        z = xt + tf.linalg.matmul(h, rt)
        if rb is not None:
            z = z + rb
        zi, zo, zf, zc = (z[:, j * hidden:(j + 1) * hidden] for j in range(4))  # i, o, f, c
        if p_i is not None:
            zi = zi + p_i * c
            zf = zf + p_f * c
        i = f(clipped(zi))
        fg = 1 - i if input_forget else f(clipped(zf))
        cell = fg * c + i * g(clipped(zc))
        if p_o is not None:
            zo = zo + p_o * cell
        o = f(clipped(zo))
        return o * hact(cell), cell
    return lstm


def _time_loop(step, xw, h0, c0, steps, lens, static_batch, hidden, dtype):
    """Runs ``step`` over the time axis of xw: (Y [seq, batch, H], last h, last c)."""
    tf = _tf()
    out = tf.TensorArray(dtype, size=steps, element_shape=tf.TensorShape([static_batch, hidden]))

    def body(t, h, c, out):
        h_new, c_new = step(xw[t], h, c)
        if lens is not None:
            valid = tf.expand_dims(t < lens, 1)
            h_new = tf.where(valid, h_new, h)
            c_new = tf.where(valid, c_new, c)
            out = out.write(t, tf.where(valid, h_new, tf.zeros_like(h_new)))
        else:
            out = out.write(t, h_new)
        return t + 1, h_new, c_new, out

    shape = tf.TensorShape([static_batch, hidden])
    _, h, c, out = tf.while_loop(
        lambda t, *_: t < steps, body, [tf.constant(0), h0, c0, out],
        shape_invariants=[tf.TensorShape([]), shape, shape, tf.TensorShape(None)])
    y = out.stack()
    y.set_shape([None, static_batch, hidden])
    return y, h, c


op("RNN", attrs=dict(_RNN_ATTRS), check=_rnn_check)(_recurrent)
op("GRU", attrs=dict(_RNN_ATTRS, linear_before_reset=0), check=_rnn_check)(_recurrent)
op("LSTM", attrs=dict(_RNN_ATTRS, input_forget=0), check=_rnn_check)(_recurrent)
