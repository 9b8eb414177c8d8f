"""ONNX symbolics for PyTorch's fused attention kernels (fused.py registers them).

``aten::_transformer_encoder_layer_fwd``, ``aten::_native_multi_head_attention``
and the nested-tensor pair ``nn.TransformerEncoder`` takes with a
``src_key_padding_mask`` (``aten::_nested_tensor_from_mask`` /
``aten::to_padded_tensor``), each written as the same math in standard ONNX ops.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch
from torch.onnx import symbolic_helper as sym

from tfx_bridge.components.pytorch_model_importer.export.onnx_ops import (
    BOOL,
    const,
    opt_int,
    reduce_axes,
    scalar,
    slice_axis,
)

ENCODER_LAYER = "aten::_transformer_encoder_layer_fwd"
MULTI_HEAD_ATTENTION = "aten::_native_multi_head_attention"
NESTED_FROM_MASK = "aten::_nested_tensor_from_mask"
TO_PADDED = "aten::to_padded_tensor"

# Dense tensors standing for nested ones (ONNX value -> its [B, L] bool "valid"
# mask); filled and read during one export, cleared when the block ends.
_NESTED: Dict[object, object] = {}


def forget_nested() -> None:
    """Clears the nested tensors one export block recorded."""
    _NESTED.clear()


def _linear(g, x, weight, bias):
    out = g.op("MatMul", x, g.op("Transpose", weight, perm_i=[1, 0]))
    return out if bias is None or sym._is_none(bias) else g.op("Add", out, bias)


def _layer_norm(g, x, weight, bias, eps: float):
    if g.opset >= 17:
        return g.op("LayerNormalization", x, weight, bias, axis_i=-1, epsilon_f=eps)
    mean = reduce_axes(g, "ReduceMean", x, [-1], keepdims=1)
    centred = g.op("Sub", x, mean)
    var = reduce_axes(g, "ReduceMean", g.op("Mul", centred, centred), [-1], keepdims=1)
    normed = g.op("Div", centred, g.op("Sqrt", g.op("Add", var, scalar(g, eps))))
    return g.op("Add", g.op("Mul", normed, weight), bias)


def _gelu(g, x):
    """Exact gelu, 0.5 x (1 + erf(x / sqrt 2)): the kernel's (no Gelu op before opset 20)."""
    erf = g.op("Erf", g.op("Div", x, scalar(g, math.sqrt(2.0))))
    return g.op("Mul", g.op("Mul", x, scalar(g, 0.5)), g.op("Add", erf, scalar(g, 1.0)))


def _heads(g, x, num_heads: int, head_dim: int, perm: List[int]):
    """[B, T, E] -> [B, T, H, dh] -> transposed by ``perm``."""
    split = g.op("Reshape", x, const(g, [0, 0, num_heads, -1]))
    return g.op("Transpose", split, perm_i=perm)


def _attention(g, query, key, value, embed_dim: int, num_heads: int, qkv_weight, qkv_bias,
               proj_weight, proj_bias, mask, mask_type: Optional[int], need_weights: bool,
               average_weights: bool):
    """The math of aten::_native_multi_head_attention; returns (output, weights or None)."""
    head_dim = embed_dim // num_heads
    if mask is None or sym._is_none(mask):
        mask = None
        valid = _NESTED.get(query)
        if valid is not None:  # nested query: its padding masks the keys
            mask, mask_type = g.op("Not", valid), 1
    if query == key and key == value:
        qkv = _linear(g, query, qkv_weight, qkv_bias)
        q, k, v = (slice_axis(g, qkv, i * embed_dim, (i + 1) * embed_dim, -1) for i in range(3))
    else:
        parts = []
        for i, x in enumerate((query, key, value)):
            w = slice_axis(g, qkv_weight, i * embed_dim, (i + 1) * embed_dim, 0)
            b = slice_axis(g, qkv_bias, i * embed_dim, (i + 1) * embed_dim, 0)
            parts.append(_linear(g, x, w, b))
        q, k, v = parts
    q = g.op("Mul", q, scalar(g, 1.0 / math.sqrt(head_dim)))
    q = _heads(g, q, num_heads, head_dim, [0, 2, 1, 3])          # [B, H, L, dh]
    k = _heads(g, k, num_heads, head_dim, [0, 2, 3, 1])          # [B, H, dh, S]
    v = _heads(g, v, num_heads, head_dim, [0, 2, 1, 3])          # [B, H, S, dh]
    scores = g.op("MatMul", q, k)                                 # [B, H, L, S]
    if mask is not None:
        masked = mask if sym._is_bool(mask) else g.op("Cast", mask, to_i=BOOL)
        if mask_type == 1:                                        # [B, S] key padding
            masked = sym._unsqueeze_helper(g, masked, [1, 2])
        scores = g.op("Where", masked, scalar(g, float("-inf")), scores)
    weights = g.op("Softmax", scores, axis_i=-1)
    context = g.op("MatMul", weights, v)                          # [B, H, L, dh]
    context = g.op("Transpose", context, perm_i=[0, 2, 1, 3])
    context = g.op("Reshape", context, const(g, [0, 0, -1]))
    out = _linear(g, context, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    if average_weights:
        weights = reduce_axes(g, "ReduceMean", weights, [1], keepdims=0)
    return out, weights


def _encoder_layer(g, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
                   mask=None, mask_type=None):
    embed_dim = sym._get_const(embed_dim, "i", "embed_dim")
    num_heads = sym._get_const(num_heads, "i", "num_heads")
    use_gelu = bool(sym._get_const(use_gelu, "b", "use_gelu"))
    norm_first = bool(sym._get_const(norm_first, "b", "norm_first"))
    eps = float(sym._get_const(eps, "f", "eps"))
    mask_type = opt_int(mask_type)
    valid = _NESTED.get(src)

    x = _layer_norm(g, src, norm_weight_1, norm_bias_1, eps) if norm_first else src
    if valid is not None:
        _NESTED[x] = valid
    x, _ = _attention(g, x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                      proj_bias, mask, mask_type, need_weights=False, average_weights=True)
    x = g.op("Add", x, src)
    if not norm_first:
        x = _layer_norm(g, x, norm_weight_1, norm_bias_1, eps)
    residual = x
    if norm_first:
        x = _layer_norm(g, x, norm_weight_2, norm_bias_2, eps)
    x = _linear(g, x, ffn_weight_1, ffn_bias_1)
    x = _gelu(g, x) if use_gelu else g.op("Relu", x)
    x = _linear(g, x, ffn_weight_2, ffn_bias_2)
    x = g.op("Add", x, residual)
    if not norm_first:
        x = _layer_norm(g, x, norm_weight_2, norm_bias_2, eps)
    if valid is not None:
        _NESTED[x] = valid
    return x


def _multi_head_attention(g, query, key, value, embed_dim, num_heads, qkv_weight, qkv_bias,
                          proj_weight, proj_bias, mask=None, need_weights=None,
                          average_attn_weights=None, mask_type=None):
    embed_dim = sym._get_const(embed_dim, "i", "embed_dim")
    num_heads = sym._get_const(num_heads, "i", "num_head")
    need = True if need_weights is None else bool(sym._get_const(need_weights, "b",
                                                                 "need_weights"))
    average = True if average_attn_weights is None else bool(
        sym._get_const(average_attn_weights, "b", "average_attn_weights"))
    out, weights = _attention(g, query, key, value, embed_dim, num_heads, qkv_weight, qkv_bias,
                              proj_weight, proj_bias, mask, opt_int(mask_type), need, average)
    valid = _NESTED.get(query)
    if valid is not None:
        _NESTED[out] = valid
    return out, weights


def _nested_from_mask(g, tensor, mask, mask_check=None):
    dense = g.op("Identity", tensor)
    _NESTED[dense] = mask if sym._is_bool(mask) else g.op("Cast", mask, to_i=BOOL)
    return dense


def _to_padded(g, tensor, padding, output_size=None):
    valid = _NESTED.get(tensor)
    if valid is None:
        raise torch.onnx.errors.SymbolicValueError(
            "to_padded_tensor of a nested tensor the importer did not build from a mask "
            "(aten::_nested_tensor_from_mask); hand the model over with dense inputs.", tensor)
    pad = scalar(g, float(sym._get_const(padding, "f", "padding")))
    return g.op("Where", sym._unsqueeze_helper(g, valid, [2]), tensor, pad)


SYMBOLICS = {
    ENCODER_LAYER: _encoder_layer,
    MULTI_HEAD_ATTENTION: _multi_head_attention,
    NESTED_FROM_MASK: _nested_from_mask,
    TO_PADDED: _to_padded,
}
