"""ONNX LSTM, GRU and RNN: one time loop over shared gate helpers (see onnx_tf/core.py
for the handler contract).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import op

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
