"""ONNX Scan: the body graph run over slices of its scan inputs, on control.py's
sub-graph glue (see onnx_tf/core.py for the handler contract).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from tfx_bridge.onnx_tf.core import is_const
from tfx_bridge.onnx_tf.errors import Unsupported
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.control import (
    UNROLL_MAX_TRIPS,
    _invariant,
    _stack,
    _tensor,
    _while,
    check_carried,
    run_body,
    scan_array,
)
from tfx_bridge.onnx_tf.registry import REQUIRED, op

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
            outs = run_body(node, "body", values + elems)
            check_carried(node, values, outs[:n_states], names)
            values = outs[:n_states]
            for k in range(n_out):
                collected[k].append(outs[n_states + k])
        stacked = [_stack(node, c, vi) for c, vi in zip(collected, out_vis, strict=True)]
    else:
        scans_t = [_tensor(node, x) for x in scans]
        length = tf.shape(scans_t[0], out_type=tf.int32)[axes[0]] if static_len is None \
            else tf.constant(static_len, tf.int32)
        arrays = [scan_array(node, vi, "scan output") for vi in out_vis]
        states_t = [_tensor(node, v) for v in states]

        def cond_fn(i, *rest):
            return i < length

        def body_fn(i, *rest):
            values, tas = list(rest[:n_states]), list(rest[n_states:])
            elems = [element(x, a, d == 1, i, length)
                     for x, a, d in zip(scans_t, axes, in_dirs, strict=True)]
            outs = run_body(node, "body", values + elems)
            new = [_tensor(node, o) for o in outs[:n_states]]
            check_carried(node, values, new, names)
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
