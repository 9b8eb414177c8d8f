"""ONNX loss ops in ONNX semantics (see onnx_tf/core.py for the handler contract).

NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss over inputs [N, C, d1, ...]
with targets [N, d1, ...]. The class scores are picked with a batched gather
(exact, no one-hot products that turn inf into nan); a target equal to
``ignore_index`` is replaced by class 0 before the gather (it may be out of
range) and weighted 0 afterwards. ``mean`` divides by the summed weights of
the non-ignored targets, as the spec and ONNX's reference do. float16 is
computed in float32 and rounded once (as ONNX Runtime does).
"""
from __future__ import annotations

from typing import Optional

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import op

_FLOAT_TYPES = {1: "float", 10: "float16", 11: "double"}
_INDEX_TYPES = {6: "int32", 7: "int64"}
_REDUCTIONS = ("none", "sum", "mean")
_ATTRS = {"reduction": "mean", "ignore_index": None}


def _check(info: NodeInfo) -> Optional[str]:
    reduction = info.attrs.get("reduction", "mean")
    if reduction not in _REDUCTIONS:
        return f"reduction={reduction!r} is not supported (ONNX defines none, sum, mean)"
    types = info.input_types
    if types and types[0] is not None and types[0] not in _FLOAT_TYPES:
        return "input of a non-float16/float/double type is not supported"
    if len(types) > 1 and types[1] is not None and types[1] not in _INDEX_TYPES:
        return "target of a type other than int32/int64 is not supported"
    return None


def _loss(node, log_prob, target, weight, dtype):
    """The reduced loss of log-probabilities ``log_prob`` [N, C, d...] (float32/64)."""
    tf = _tf()
    rank = log_prob.shape.rank
    reduction = node.attr("reduction")
    ignore_index = node.attr("ignore_index")
    target = tf.cast(target, tf.int64)
    if ignore_index is not None:
        keep = tf.not_equal(target, int(ignore_index))
        target = tf.where(keep, target, tf.zeros_like(target))
    # [N, d..., C] so every target element gathers its class along the last axis.
    last = tf.transpose(log_prob, [0, *range(2, rank), 1])
    picked = tf.gather(last, target[..., None], batch_dims=rank - 1)[..., 0]
    loss = -picked
    weights = None
    if ignore_index is not None:
        # A select, not a product: the class-0 score gathered for an ignored target may be
        # inf or nan, and the spec's loss there is exactly 0.
        loss = tf.where(keep, loss, tf.zeros_like(loss))
        weights = tf.cast(keep, loss.dtype)
    if weight is not None:
        gathered = tf.gather(tf.cast(weight, loss.dtype), target)
        weights = gathered if weights is None else weights * gathered
        loss = loss * weights
    if reduction == "sum":
        loss = tf.reduce_sum(loss)
    elif reduction == "mean":
        if weights is None:
            loss = tf.reduce_mean(loss)
        else:
            loss = tf.reduce_sum(loss) / tf.reduce_sum(weights)
    return tf.cast(loss, dtype)


def _inputs(node):
    """(scores in float32/64, target, weight or None, the output dtype)."""
    tf = _tf()
    dtype = node.dtype(0)
    if dtype.name not in ("float16", "float32", "float64"):
        node.refuse(f"input of type {dtype.name} is not supported", "use float16/float/double")
    if node.dtype(1).name not in ("int32", "int64"):
        node.refuse(f"target of type {node.dtype(1).name} is not supported", "use int32/int64")
    rank = node.rank(0)
    if rank < 2:
        node.refuse(f"input of rank {rank} (ONNX needs [N, C, d1, ...])",
                    "give the loss a batch and a class dimension")
    if node.rank(1) != rank - 1:
        node.refuse(f"target of rank {node.rank(1)} for an input of rank {rank} (ONNX needs "
                    "rank - 1)", "give the target the input's shape without the class axis")
    compute = tf.float32 if dtype == tf.float16 else dtype
    x = tf.cast(node.t(0), compute)
    weight = node.t(2) if node.has(2) else None
    return x, node.t(1), weight, dtype


@op("NegativeLogLikelihoodLoss", attrs=dict(_ATTRS), check=_check, since=12)
def negative_log_likelihood_loss(node):
    x, target, weight, dtype = _inputs(node)
    return _loss(node, x, target, weight, dtype)


@op("SoftmaxCrossEntropyLoss", attrs=dict(_ATTRS), check=_check, since=12)
def softmax_cross_entropy_loss(node):
    tf = _tf()
    x, target, weight, dtype = _inputs(node)
    log_prob = tf.nn.log_softmax(x, axis=1)
    loss = _loss(node, log_prob, target, weight, dtype)
    wants_log_prob = len(node.proto.output) > 1 and bool(node.proto.output[1])
    return [loss, tf.cast(log_prob, dtype)] if wants_log_prob else loss
