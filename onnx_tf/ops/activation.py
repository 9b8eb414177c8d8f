"""ONNX activation ops (see onnx_tf/core.py for the handler contract): Relu and its variants, Gelu,
Clip, Dropout (inference: identity).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.elementwise_util import (
    CONSUMED,
    _float_input,
    _is_unsigned,
    is_float,
    numeric_input,
    same_dtype,
)
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- activations


@op("Relu", attrs=dict(CONSUMED))
def relu(node):
    x = numeric_input(node, 0)
    if _is_unsigned(x.dtype):
        return _tf().identity(x)
    return _tf().nn.relu(x)


@op("LeakyRelu", attrs={"alpha": 0.01, **CONSUMED})
def leaky_relu(node):
    tf = _tf()
    x = _float_input(node)
    # TF's kernel is x > 0 ? x : x * alpha: the same values as ONNX's, any alpha
    return tf.nn.leaky_relu(x, alpha=float(node.attr("alpha")))


@op("PRelu", attrs=dict(CONSUMED))
def prelu(node):
    tf = _tf()
    x = numeric_input(node, 0)
    slope = numeric_input(node, 1)
    same_dtype(node, x, slope)
    if node.opset < 7:
        shape = slope.shape
        if not (shape.is_fully_defined() and shape.num_elements() == 1) and \
                shape.as_list() != x.shape.as_list():
            node.refuse("a per-channel slope at opset < 7 (no broadcasting rule then)",
                        "export at opset >= 9 with the slope shaped [C, 1, 1]")
    if _is_unsigned(x.dtype):
        return tf.identity(x)  # never negative; the slope broadcasts to x (unidirectional)
    return tf.where(x < 0, x * slope, x)


@op("Elu", attrs={"alpha": 1.0, **CONSUMED})
def elu(node):
    tf = _tf()
    x = _float_input(node)
    alpha = tf.constant(node.attr("alpha"), x.dtype)
    return tf.where(x < 0, alpha * tf.math.expm1(tf.minimum(x, 0)), x)


@op("Celu", attrs={"alpha": 1.0})
def celu(node):
    tf = _tf()
    x = _float_input(node)
    alpha = tf.constant(node.attr("alpha"), x.dtype)
    neg_part = alpha * tf.math.expm1(tf.minimum(x, 0) / alpha)
    return tf.maximum(x, 0) + tf.minimum(neg_part, 0)


@op("Selu", attrs={"alpha": None, "gamma": None, **CONSUMED})
def selu(node):
    tf = _tf()
    x = _float_input(node)
    old = node.opset < 6  # Selu-1's defaults are rounder
    alpha = node.attr("alpha")
    gamma = node.attr("gamma")
    if alpha is None:
        alpha = 1.673200011253357 if old else 1.67326319217681884765625
    if gamma is None:
        gamma = 1.0506999492645264 if old else 1.05070102214813232421875
    alpha = tf.constant(alpha, x.dtype)
    gamma = tf.constant(gamma, x.dtype)
    return gamma * tf.where(x > 0, x, alpha * tf.math.expm1(tf.minimum(x, 0)))


@op("HardSigmoid", attrs={"alpha": 0.2, "beta": 0.5, **CONSUMED})
def hard_sigmoid(node):
    tf = _tf()
    x = _float_input(node)
    alpha = tf.constant(node.attr("alpha"), x.dtype)
    beta = tf.constant(node.attr("beta"), x.dtype)
    return tf.clip_by_value(alpha * x + beta, tf.constant(0, x.dtype), tf.constant(1, x.dtype))


@op("HardSwish")
def hard_swish(node):
    tf = _tf()
    x = _float_input(node)
    gate = x * tf.constant(1 / 6, x.dtype) + tf.constant(0.5, x.dtype)
    return x * tf.clip_by_value(gate, tf.constant(0, x.dtype), tf.constant(1, x.dtype))


@op("Softplus")
def softplus(node):
    return _tf().math.softplus(_float_input(node))


@op("Softsign")
def softsign(node):
    return _tf().nn.softsign(_float_input(node))


@op("Mish")
def mish(node):
    tf = _tf()
    x = _float_input(node)
    return x * tf.math.tanh(tf.math.softplus(x))


def _gelu_check(info: NodeInfo) -> Optional[str]:
    if info.attrs.get("approximate") not in ("none", "tanh"):
        return f"approximate={info.attrs.get('approximate')!r} (only 'none' and 'tanh' exist)"
    return None


@op("Gelu", attrs={"approximate": "none"}, check=_gelu_check)
def gelu(node):
    tf = _tf()
    x = _float_input(node)
    half = tf.constant(0.5, x.dtype)
    one = tf.constant(1.0, x.dtype)
    if node.attr("approximate") == "tanh":
        inner = tf.constant(math.sqrt(2 / math.pi), x.dtype) * (
            x + tf.constant(0.044715, x.dtype) * x * x * x)
        return half * x * (one + tf.math.tanh(inner))
    return half * x * (one + tf.math.erf(x * tf.constant(1 / math.sqrt(2), x.dtype)))


@op("ThresholdedRelu", attrs={"alpha": 1.0})
def thresholded_relu(node):
    tf = _tf()
    x = _float_input(node)
    return tf.where(x > tf.constant(node.attr("alpha"), x.dtype), x, tf.zeros_like(x))


@op("Shrink", attrs={"bias": 0.0, "lambd": 0.5})
def shrink(node):
    tf = _tf()
    x = numeric_input(node, 0)
    dtype = x.dtype
    # integers: computed in float64 and truncated back, as ONNX's reference does
    xf = x if is_float(dtype) else tf.cast(x, tf.float64)
    bias = tf.constant(node.attr("bias"), xf.dtype)
    lambd = tf.constant(node.attr("lambd"), xf.dtype)
    out = tf.where(xf < -lambd, xf + bias, tf.where(xf > lambd, xf - bias, tf.zeros_like(xf)))
    return out if out.dtype == dtype else tf.cast(out, dtype)


def _clip_bound(node, name: str, x):
    """Clip's bound ``name`` ('min'/'max') in x's dtype, or None for no bound."""
    tf = _tf()
    if node.opset >= 11:
        i = 1 if name == "min" else 2
        if not node.has(i):
            return None
        bound = node.t(i)
        if bound.dtype != x.dtype:
            node.refuse(f"{name} of dtype {bound.dtype.name} for input {x.dtype.name}",
                        "ONNX requires the bounds to have the input's type")
        if bound.shape.rank not in (None, 0) and bound.shape.num_elements() != 1:
            node.refuse(f"a non-scalar {name} (shape {bound.shape})", "pass a scalar bound")
        return tf.reshape(bound, [])
    if not is_float(x.dtype):
        node.refuse(f"Clip-{6 if node.opset >= 6 else 1} on dtype {x.dtype.name}",
                    "export at opset >= 12 (integer Clip)")
    value = node.attr(name)
    if value is None:
        if node.opset < 6:
            return None  # Clip-1: an absent bound does not clip
        value = 3.4028234663852886e38 * (-1 if name == "min" else 1)
    return tf.constant(value, x.dtype)


def _static(bound):
    value = None if bound is None else _tf().get_static_value(bound)
    return None if value is None else float(value)


@op("Clip", attrs={"min": None, "max": None, **CONSUMED})
def clip(node):
    tf = _tf()
    x = numeric_input(node, 0)
    low, high = _clip_bound(node, "min", x), _clip_bound(node, "max", x)
    if is_float(x.dtype) and _static(low) == 0.0 and _static(high) == 6.0:
        return tf.nn.relu6(x)  # the same values; an op TF's remapper fuses into a Conv2D
    # min > max gives max everywhere (ONNX), which this order of min/max produces
    if low is not None:
        x = tf.math.maximum(x, low)
    if high is not None:
        x = tf.math.minimum(x, high)
    return x if low is not None or high is not None else tf.identity(x)


def _dropout_check(info: NodeInfo) -> Optional[str]:
    if info.opset < 7 and not info.attrs.get("is_test") and info.attrs.get("ratio") != 0:
        return ("training-mode Dropout (is_test=0, the default before opset 7) with ratio "
                f"{info.attrs.get('ratio')}")
    return None


@op("Dropout", attrs={"ratio": 0.5, "is_test": 0, "seed": None, **CONSUMED},
    check=_dropout_check)
def dropout(node):
    """Inference: the input unchanged, the mask all True (1 before opset 10)."""
    tf = _tf()
    _float_input(node)
    if node.opset < 7 and not node.attr("is_test") and node.attr("ratio") != 0:
        node.refuse("training-mode Dropout (is_test=0)",
                    "export in eval mode (model.eval()) or at opset >= 7")
    if node.opset >= 12:
        training = False
        if node.has(2):
            mode = node.maybe_const(2)
            if mode is None:
                node.refuse("a run-time training_mode (training-mode Dropout is random)",
                            "export in eval mode (model.eval()) so training_mode is absent "
                            "or a constant False")
            training = bool(np.asarray(mode).reshape(-1)[0])
        if training:
            ratio = node.maybe_const(1) if node.has(1) else np.array(0.5)
            if ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
                node.refuse("training_mode=True with a non-zero (or run-time) ratio: random "
                            "output", "export in eval mode (model.eval())")
    x = node.value(0)
    outputs = [x]
    if len(node.proto.output) > 1 and node.proto.output[1]:
        mask_dtype = tf.bool if node.opset >= 10 else node.dtype(0)
        outputs.append(tf.ones_like(node.t(0), dtype=mask_dtype))
    return outputs
