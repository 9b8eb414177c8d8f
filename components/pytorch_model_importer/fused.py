"""ONNX forms for PyTorch's fused kernels recorded in traced TorchScript files.

Imported only when a torch module is exported (torch is the ``onnx`` extra).

A TorchScript file traced the usual way (``model.eval()``, ``torch.no_grad()``,
``torch.jit.trace``) of a model holding ``nn.TransformerEncoder(Layer)``,
``nn.MultiheadAttention`` or ``nn.EmbeddingBag`` records the fused kernels
below; their code is compiled, so swaps.py cannot reach them. For the duration
of an export, :func:`onnx_symbolics` registers an ONNX symbolic for each that
writes the same math with standard ONNX ops (no Loop, default domain only):

- ``aten::_transformer_encoder_layer_fwd``: layer norms (pre or post,
  ``norm_first``), self-attention, residuals, and the feed-forward block with
  relu or exact (erf) gelu;
- ``aten::_native_multi_head_attention``: in-projection (one MatMul when q, k
  and v are the same tensor, three otherwise), scaled scores, the mask
  (``mask_type`` 0 ``[L, S]``, 1 key padding ``[B, S]``, 2 ``[B, H, L, S]``; a
  float mask counts as a boolean one, non-zero = masked, as the kernel reads
  it), softmax, out-projection, and the weights when ``need_weights``
  (averaged over heads with ``average_attn_weights``);
- ``aten::_nested_tensor_from_mask`` / ``aten::to_padded_tensor``: the
  nested-tensor path ``nn.TransformerEncoder`` takes with a
  ``src_key_padding_mask``. The nested tensor stays the padded dense tensor and
  its mask becomes the key padding mask of the layers that read it; padded
  positions come out as the padding value, as ``to_padded_tensor`` gives;
- ``aten::embedding_bag``: fixed-width 2-D ids (offsets ``arange(0, N, W)``, as
  ``F.embedding_bag`` writes them) as a Gather over ``[B, W]`` and a
  reduction; ragged 1-D ids + offsets scattered (ScatterND, segment ids by
  ScatterElements + CumSum, or a comparison below opset 16) into a padded
  ``[B, max_len, D]`` block, then the same reduction. Modes sum (with
  ``per_sample_weights``), mean and max; ``padding_idx`` is left out of every
  reduction and an empty or all-padding bag gives zeros, as PyTorch does.

:func:`fused_kernels` lists the kernels a TorchScript module's graph holds, and
:func:`rewrites` turns them into the import report's entries.

Size: one symbolic per fused kernel, each a faithful copy of the kernel's math
(masks, norm order, bag modes); split further they would scatter one export
mechanism over files that are always read together.
"""
from __future__ import annotations

import contextlib
import math
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch.onnx import symbolic_helper as sym

FUSED_KERNEL_DECOMPOSED = "fused-kernel-decomposed"

ENCODER_LAYER = "aten::_transformer_encoder_layer_fwd"
MULTI_HEAD_ATTENTION = "aten::_native_multi_head_attention"
EMBEDDING_BAG = "aten::embedding_bag"
NESTED_FROM_MASK = "aten::_nested_tensor_from_mask"
TO_PADDED = "aten::to_padded_tensor"

# The kernels named in the report; the nested-tensor pair comes with the encoder.
FUSED_KERNELS = (ENCODER_LAYER, MULTI_HEAD_ATTENTION, EMBEDDING_BAG, NESTED_FROM_MASK,
                 TO_PADDED)
_REPORTED = (ENCODER_LAYER, MULTI_HEAD_ATTENTION, EMBEDDING_BAG)

# torch.onnx dispatches to the closest registered opset at or below the target:
# the symbolics are registered at every opset so they win over the built-in
# embedding_bag (a Loop, registered at 10 and 11).
OPSETS = tuple(range(9, 21))
_LOWEST = float(torch.finfo(torch.float32).min)

_FLOAT, _INT64, _BOOL = 1, 7, 9  # ONNX TensorProto data types

# Dense tensors standing for nested ones (ONNX value -> its [B, L] bool "valid"
# mask); filled and read during one export, cleared when the block ends.
_NESTED: Dict[object, object] = {}


# --------------------------------------------------------------------------- helpers

def _const(g, values, dtype=torch.int64):
    return g.op("Constant", value_t=torch.tensor(values, dtype=dtype))


def _scalar(g, value: float):
    return g.op("Constant", value_t=torch.tensor(value, dtype=torch.float32))


def _reduce(g, op: str, x, axes: Sequence[int], keepdims: int = 0):
    """ReduceMean/ReduceMax/ReduceSum over ``axes`` in the form the opset wants."""
    if op == "ReduceSum":
        return sym._reducesum_helper(g, x, axes_i=list(axes), keepdims_i=keepdims)
    if g.opset >= 18:
        return g.op(op, x, _const(g, list(axes)), keepdims_i=keepdims)
    return g.op(op, x, axes_i=list(axes), keepdims_i=keepdims)


def _slice(g, x, start: int, end: int, axis: int):
    return g.op("Slice", x, _const(g, [start]), _const(g, [end]), _const(g, [axis]))


def _linear(g, x, weight, bias):
    out = g.op("MatMul", x, g.op("Transpose", weight, perm_i=[1, 0]))
    return out if bias is None or sym._is_none(bias) else g.op("Add", out, bias)


def _layer_norm(g, x, weight, bias, eps: float):
    if g.opset >= 17:
        return g.op("LayerNormalization", x, weight, bias, axis_i=-1, epsilon_f=eps)
    mean = _reduce(g, "ReduceMean", x, [-1], keepdims=1)
    centred = g.op("Sub", x, mean)
    var = _reduce(g, "ReduceMean", g.op("Mul", centred, centred), [-1], keepdims=1)
    normed = g.op("Div", centred, g.op("Sqrt", g.op("Add", var, _scalar(g, eps))))
    return g.op("Add", g.op("Mul", normed, weight), bias)


def _gelu(g, x):
    """Exact gelu, 0.5 x (1 + erf(x / sqrt 2)): the kernel's (no Gelu op before opset 20)."""
    erf = g.op("Erf", g.op("Div", x, _scalar(g, math.sqrt(2.0))))
    return g.op("Mul", g.op("Mul", x, _scalar(g, 0.5)), g.op("Add", erf, _scalar(g, 1.0)))


def _opt_int(value) -> Optional[int]:
    if value is None or sym._is_none(value):
        return None
    return int(sym._maybe_get_const(value, "i"))


def _heads(g, x, num_heads: int, head_dim: int, perm: List[int]):
    """[B, T, E] -> [B, T, H, dh] -> transposed by ``perm``."""
    split = g.op("Reshape", x, _const(g, [0, 0, num_heads, -1]))
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
        q, k, v = (_slice(g, qkv, i * embed_dim, (i + 1) * embed_dim, -1) for i in range(3))
    else:
        parts = []
        for i, x in enumerate((query, key, value)):
            w = _slice(g, qkv_weight, i * embed_dim, (i + 1) * embed_dim, 0)
            b = _slice(g, qkv_bias, i * embed_dim, (i + 1) * embed_dim, 0)
            parts.append(_linear(g, x, w, b))
        q, k, v = parts
    q = g.op("Mul", q, _scalar(g, 1.0 / math.sqrt(head_dim)))
    q = _heads(g, q, num_heads, head_dim, [0, 2, 1, 3])          # [B, H, L, dh]
    k = _heads(g, k, num_heads, head_dim, [0, 2, 3, 1])          # [B, H, dh, S]
    v = _heads(g, v, num_heads, head_dim, [0, 2, 1, 3])          # [B, H, S, dh]
    scores = g.op("MatMul", q, k)                                 # [B, H, L, S]
    if mask is not None:
        masked = mask if sym._is_bool(mask) else g.op("Cast", mask, to_i=_BOOL)
        if mask_type == 1:                                        # [B, S] key padding
            masked = sym._unsqueeze_helper(g, masked, [1, 2])
        scores = g.op("Where", masked, _scalar(g, float("-inf")), scores)
    weights = g.op("Softmax", scores, axis_i=-1)
    context = g.op("MatMul", weights, v)                          # [B, H, L, dh]
    context = g.op("Transpose", context, perm_i=[0, 2, 1, 3])
    context = g.op("Reshape", context, _const(g, [0, 0, -1]))
    out = _linear(g, context, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    if average_weights:
        weights = _reduce(g, "ReduceMean", weights, [1], keepdims=0)
    return out, weights


# --------------------------------------------------------------------------- symbolics

def _encoder_layer(g, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
                   mask=None, mask_type=None):
    embed_dim = sym._get_const(embed_dim, "i", "embed_dim")
    num_heads = sym._get_const(num_heads, "i", "num_heads")
    use_gelu = bool(sym._get_const(use_gelu, "b", "use_gelu"))
    norm_first = bool(sym._get_const(norm_first, "b", "norm_first"))
    eps = float(sym._get_const(eps, "f", "eps"))
    mask_type = _opt_int(mask_type)
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
                              proj_weight, proj_bias, mask, _opt_int(mask_type), need, average)
    valid = _NESTED.get(query)
    if valid is not None:
        _NESTED[out] = valid
    return out, weights


def _nested_from_mask(g, tensor, mask, mask_check=None):
    dense = g.op("Identity", tensor)
    _NESTED[dense] = mask if sym._is_bool(mask) else g.op("Cast", mask, to_i=_BOOL)
    return dense


def _to_padded(g, tensor, padding, output_size=None):
    valid = _NESTED.get(tensor)
    if valid is None:
        raise torch.onnx.errors.SymbolicValueError(
            "to_padded_tensor of a nested tensor the importer did not build from a mask "
            "(aten::_nested_tensor_from_mask); hand the model over with dense inputs.", tensor)
    pad = _scalar(g, float(sym._get_const(padding, "f", "padding")))
    return g.op("Where", sym._unsqueeze_helper(g, valid, [2]), tensor, pad)


def _fixed_width(g, offsets):
    """W when ``offsets`` is arange(0, N, W) (F.embedding_bag over 2-D ids), else None."""
    def uncast(value):
        while value.node().kind() == "onnx::Cast":
            value = value.node().input()
        return value

    node = uncast(offsets).node()
    if node.kind() != "onnx::Range":
        return None
    start, _limit, delta = node.inputs()
    start = uncast(start)
    if not sym._is_onnx_constant(start) or int(sym._parse_arg(start, "i")) != 0:
        return None
    return delta


def _embedding_bag(g, weight, indices, offsets, scale_grad_by_freq=None, mode=None,
                   sparse=None, per_sample_weights=None, include_last_offset=None,
                   padding_idx=None):
    mode = 0 if mode is None else int(sym._get_const(mode, "i", "mode"))
    last_offset = bool(include_last_offset is not None and not sym._is_none(include_last_offset)
                       and sym._get_const(include_last_offset, "b", "include_last_offset"))
    pad = _opt_int(padding_idx)
    pad = None if pad is None or pad < 0 else pad
    psw = None if per_sample_weights is None or sym._is_none(per_sample_weights) \
        else per_sample_weights
    if psw is not None and mode != 0:
        raise torch.onnx.errors.SymbolicValueError(
            "embedding_bag: per_sample_weights needs mode='sum'.", per_sample_weights)
    if mode not in (0, 1, 2):
        raise torch.onnx.errors.SymbolicValueError(f"embedding_bag mode {mode}?", indices)
    indices = g.op("Cast", indices, to_i=_INT64)
    width = None if last_offset else _fixed_width(g, offsets)

    if width is not None:  # fixed width: [B, W] ids
        shape = g.op("Concat", _const(g, [-1]),
                     g.op("Reshape", g.op("Cast", width, to_i=_INT64), _const(g, [1])), axis_i=0)
        ids = g.op("Reshape", indices, shape)                                 # [B, W]
        vectors = g.op("Gather", weight, ids, axis_i=0)                      # [B, W, D]
        if psw is not None:
            vectors = g.op("Mul", vectors,
                           sym._unsqueeze_helper(g, g.op("Reshape", psw, shape), [2]))
        keep = None
        if pad is not None:
            keep = g.op("Cast", g.op("Not", g.op("Equal", ids, _const(g, pad))), to_i=_FLOAT)
    else:  # ragged: scatter into [B, max_len, D]
        vectors, keep = _ragged(g, weight, indices, offsets, psw, pad, last_offset)
    return _pool(g, vectors, keep, mode), None, None, None


def _ragged(g, weight, indices, offsets, psw, pad, last_offset: bool):
    """Ragged bags as a padded block: (vectors [B, M, D], keep [B, M] float)."""
    offsets = g.op("Cast", offsets, to_i=_INT64)
    if last_offset:
        offsets = _slice(g, offsets, 0, -1, 0)
    n = g.op("Shape", indices)                                                # [1]: N
    bags = g.op("Shape", offsets)                                             # [1]: B
    positions = g.op("Range", _const(g, 0), g.op("Squeeze", n) if g.opset < 13 else
                     sym._squeeze_helper(g, n, [0]), _const(g, 1))           # [N]
    if g.opset >= 16:
        marks = g.op("ScatterElements",
                     g.op("ConstantOfShape", g.op("Add", n, _const(g, [1])),
                          value_t=torch.tensor([0], dtype=torch.int64)),
                     offsets, g.op("ConstantOfShape", bags,
                                   value_t=torch.tensor([1], dtype=torch.int64)),
                     axis_i=0, reduction_s="add")
        starts = g.op("CumSum", g.op("Slice", marks, _const(g, [0]), n, _const(g, [0])),
                      _const(g, 0))
    else:  # number of offsets <= j, without a scatter-add
        le = g.op("LessOrEqual", sym._unsqueeze_helper(g, offsets, [0]),
                  sym._unsqueeze_helper(g, positions, [1]))                   # [N, B]
        starts = _reduce(g, "ReduceSum", g.op("Cast", le, to_i=_INT64), [1], keepdims=0)
    segment = g.op("Sub", starts, _const(g, 1))                               # [N]
    within = g.op("Sub", positions, g.op("Gather", offsets, segment, axis_i=0))
    ends = g.op("Concat", _slice(g, offsets, 1, 2**62, 0), n, axis_i=0)
    lengths = g.op("Sub", ends, offsets)                                      # [B]
    longest = g.op("Max", _reduce(g, "ReduceMax", lengths, [0], keepdims=1), _const(g, [1]))
    where = g.op("Concat", sym._unsqueeze_helper(g, segment, [1]),
                 sym._unsqueeze_helper(g, within, [1]), axis_i=1)             # [N, 2]
    block = g.op("Concat", bags, longest, axis_i=0)                           # [B, M]
    dim = _slice(g, g.op("Shape", weight), 1, 2, 0)
    vectors = g.op("Gather", weight, indices, axis_i=0)                       # [N, D]
    if psw is not None:
        vectors = g.op("Mul", vectors, sym._unsqueeze_helper(g, psw, [1]))
    vectors = g.op("ScatterND", g.op("ConstantOfShape", g.op("Concat", block, dim, axis_i=0),
                                     value_t=torch.tensor([0.0])), where, vectors)
    keep = g.op("ConstantOfShape", g.op("Shape", indices), value_t=torch.tensor([1.0]))
    if pad is not None:
        keep = g.op("Cast", g.op("Not", g.op("Equal", indices, _const(g, pad))), to_i=_FLOAT)
    keep = g.op("ScatterND", g.op("ConstantOfShape", block, value_t=torch.tensor([0.0])),
                where, keep)
    return vectors, keep


def _pool(g, vectors, keep, mode: int):
    """Sum/mean/max over axis 1 of [B, W, D], leaving out keep == 0 (empty bag: zeros)."""
    if mode == 2:
        if keep is None:
            return _reduce(g, "ReduceMax", vectors, [1])
        kept = g.op("Cast", sym._unsqueeze_helper(g, keep, [2]), to_i=_BOOL)   # [B, W, 1]
        pooled = _reduce(g, "ReduceMax", g.op("Where", kept, vectors, _scalar(g, _LOWEST)), [1])
        some = g.op("Greater", _reduce(g, "ReduceMax", keep, [1], keepdims=1), _scalar(g, 0.0))
        return g.op("Where", some, pooled, _scalar(g, 0.0))
    if keep is not None:
        vectors = g.op("Mul", vectors, sym._unsqueeze_helper(g, keep, [2]))
    total = _reduce(g, "ReduceSum", vectors, [1])
    if mode == 0:
        return total
    if keep is None:
        count = g.op("Cast", _slice(g, g.op("Shape", vectors), 1, 2, 0), to_i=_FLOAT)
    else:
        count = g.op("Max", _reduce(g, "ReduceSum", keep, [1], keepdims=1), _scalar(g, 1.0))
    return g.op("Div", total, count)


_SYMBOLICS = {
    ENCODER_LAYER: _encoder_layer,
    MULTI_HEAD_ATTENTION: _multi_head_attention,
    EMBEDDING_BAG: _embedding_bag,
    NESTED_FROM_MASK: _nested_from_mask,
    TO_PADDED: _to_padded,
}


@contextlib.contextmanager
def onnx_symbolics(opsets: Sequence[int] = OPSETS) -> Iterator[None]:
    """Registers the fused kernels' ONNX symbolics for the block, then unregisters them.

    Process-wide while the block runs (torch.onnx's registry is global): run
    one export at a time inside it.
    """
    _NESTED.clear()
    try:
        with registered({name: (fn, opsets) for name, fn in _SYMBOLICS.items()}):
            yield
    finally:
        _NESTED.clear()


@contextlib.contextmanager
def registered(symbolics: Dict[str, Tuple[object, Sequence[int]]]) -> Iterator[None]:
    """Registers each ``{aten name: (symbolic, opsets)}`` for the block, then
    unregisters them (torch's built-in symbolic is back after the block)."""
    done: List[Tuple[str, int]] = []
    try:
        for name, (fn, opsets) in symbolics.items():
            for opset in opsets:
                torch.onnx.register_custom_op_symbolic(name, fn, opset)
                done.append((name, opset))
        yield
    finally:
        for name, opset in done:
            torch.onnx.unregister_custom_op_symbolic(name, opset)


# --------------------------------------------------------------------------- report

def _calls(graph) -> List[str]:
    """The reported fused kernels ``graph`` calls itself (not through submodules)."""
    found: List[str] = []

    def walk(block) -> None:
        for node in block.nodes():
            if node.kind() in _REPORTED:
                found.append(node.kind())
            for sub in node.blocks():
                walk(sub)

    walk(graph)
    return found


def fused_kernels(module) -> List[Tuple[str, str]]:
    """(kernel, qualified module name) per fused kernel call in a TorchScript module.

    Read from each submodule's own forward graph (a traced module records an
    op in the forward of the module that ran it), so names hold for a file
    loaded with torch.jit.load too, where trace scopes are gone. '(root)' is
    the root's own forward; a module that is not TorchScript gives [].
    """
    if isinstance(module, torch.jit.ScriptFunction):
        return [(kind, "(root)") for kind in _calls(module.graph)]
    if not isinstance(module, torch.jit.ScriptModule):
        return []
    found: List[Tuple[str, str]] = []
    for name, sub in module.named_modules():
        try:
            graph = sub.graph
        except (AttributeError, RuntimeError):  # no forward
            continue
        found.extend((kind, name or "(root)") for kind in _calls(graph))
    return found


def rewrites(module) -> list:
    """The import report's entry for the fused kernels of ``module`` ([] when none)."""
    from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite

    found = fused_kernels(module)
    if not found:
        return []
    kinds = sorted({kind.split("::", 1)[1] for kind, _ in found})
    return [Rewrite(
        FUSED_KERNEL_DECOMPOSED, [f"{name} ({kind})" for kind, name in found],
        f"the TorchScript graph calls PyTorch's fused kernels ({', '.join(kinds)}), which "
        "have no ONNX form (or, for embedding_bag, a Loop): exported as the same math in "
        "standard ONNX ops")]
