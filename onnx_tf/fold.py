"""BatchNormalization folded into the convolution before it, on the ONNX graph.

``Conv -> BatchNormalization`` with constant weights and statistics is one
convolution with scaled weights and a shifted bias: ``W' = W * s`` per output
channel and ``b' = (b - mean) * s + B`` with ``s = scale / sqrt(var + eps)``,
computed in float64 and rounded once to the weights' type (exact up to that
rounding). The convolution then ends in a BiasAdd that TF's CPU remapper can
fuse with the activation after it. Only where the convolution's output feeds
nothing but the BatchNormalization (and is not a graph output), in the main
graph; exporters in eval mode often fold it already.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, Optional

import numpy as np

from tfx_bridge.onnx_tf.check import iter_nodes
from tfx_bridge.onnx_tf.dtypes import as_carrier


def _floats(name: str, initializers: Dict[str, object]) -> Optional[np.ndarray]:
    from onnx import numpy_helper
    tensor = initializers.get(name)
    if tensor is None:
        return None
    array = as_carrier(numpy_helper.to_array(tensor), tensor.data_type)
    return array if array.dtype in (np.float16, np.float32, np.float64) else None


def _attr(node, name: str, default):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def fold_batch_norms(model):
    """``model`` with every foldable Conv -> BatchNormalization pair made one Conv (a copy;
    ``model`` itself when there is none)."""
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    uses = Counter(name for node in iter_nodes(graph) for name in node.input)
    uses.update(o.name for o in graph.output)
    producer = {out: node for node in graph.node for out in node.output}
    folds = []
    for bn in graph.node:
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
            continue
        if _attr(bn, "training_mode", 0) or _attr(bn, "spatial", 1) != 1 or len(
                [o for o in bn.output if o]) != 1 or len(bn.input) != 5:
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or uses[bn.input[0]] != 1:
            continue
        w = _floats(conv.input[1], initializers)
        b = _floats(conv.input[2], initializers) if len(conv.input) > 2 and conv.input[2] \
            else None
        stats = [_floats(n, initializers) for n in bn.input[1:]]
        if w is None or any(s is None for s in stats) or (
                len(conv.input) > 2 and conv.input[2] and b is None):
            continue
        scale, shift, mean, var = (s.astype(np.float64).reshape(-1) for s in stats)
        channels = w.shape[0]
        if any(s.size != channels for s in (scale, shift, mean, var)):
            continue
        factor = scale / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5)))
        bias = np.zeros(channels) if b is None else b.astype(np.float64).reshape(-1)
        new_w = (w.astype(np.float64) * factor.reshape(-1, *[1] * (w.ndim - 1))).astype(w.dtype)
        new_b = ((bias - mean) * factor + shift).astype(w.dtype)
        folds.append((conv, bn, new_w, new_b))
    if not folds:
        return model
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    nodes = list(folded.graph.node)
    index = {id(node): i for i, node in enumerate(graph.node)}
    drop = set()
    for k, (conv, bn, new_w, new_b) in enumerate(folds):
        target = nodes[index[id(conv)]]
        w_name, b_name = f"{bn.output[0]}__folded_w{k}", f"{bn.output[0]}__folded_b{k}"
        folded.graph.initializer.extend([numpy_helper.from_array(new_w, w_name),
                                         numpy_helper.from_array(new_b, b_name)])
        del target.input[1:]
        target.input.extend([w_name, b_name])
        target.output[0] = bn.output[0]
        drop.add(index[id(bn)])
    kept = []
    for i, node in enumerate(nodes):
        if i not in drop:  # copies: the originals go with the field they are cleared from
            kept.append(onnx.NodeProto())
            kept[-1].CopyFrom(node)
    del folded.graph.node[:]
    folded.graph.node.extend(kept)
    return folded
