"""TorchScript files traced with PyTorch's fused kernels export to standard ONNX ops
(export/fused.py)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer.export import fused  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.export.fused_attention import (  # noqa: E402
    ENCODER_LAYER,
    MULTI_HEAD_ATTENTION,
    NESTED_FROM_MASK,
    TO_PADDED,
)
from tfx_bridge.components.pytorch_model_importer.export.fused_embedding_bag import (  # noqa: E402
    EMBEDDING_BAG,
)

D, H, L = 8, 2, 5
BATCHES = (1, 7)


def _trace(model, args):
    model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(model, args, check_trace=False)


def _export(ts, args, path, names, n_out=1, dynamic=None, opset=17):
    outs = [f"out{i}" for i in range(n_out)]
    axes = dynamic or {n: {0: "batch"} for n in names}
    axes.update({o: {0: "batch"} for o in outs})
    with fused.onnx_symbolics(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ts, args, str(path), input_names=names, output_names=outs,
                          dynamic_axes=axes, opset_version=opset, dynamo=False)
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    return model


def _check_graph(model):
    kinds = {n.op_type for n in model.graph.node}
    assert "Loop" not in kinds
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}


def _compare(ts, path, make_args, names, n_out=1):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in BATCHES:
        args = make_args(batch)
        with torch.no_grad():
            want = ts(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = session.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})
        assert len(got) == n_out
        for w, o in zip(want[:n_out], got, strict=True):
            assert o.shape == tuple(w.shape)
            np.testing.assert_allclose(o, w.numpy(), atol=1e-4, rtol=1e-4)


def _roundtrip(model, make_args, names, tmp_path, n_out=1, kernel=None, opset=17):
    torch.manual_seed(0)
    args = make_args(2)
    ts = _trace(model, args)
    kinds = {n.kind() for n in ts.inlined_graph.nodes()}
    if kernel:
        assert kernel in kinds, sorted(kinds)
    path = tmp_path / "m.onnx"
    exported = _export(ts, args, path, names, n_out=n_out, opset=opset)
    _check_graph(exported)
    _compare(ts, path, make_args, names, n_out=n_out)
    return ts, exported


def _seq(batch):
    return torch.randn(batch, L, D, generator=torch.Generator().manual_seed(batch))


def _padding(batch):
    """Key padding, left-aligned (True = padded): bag i keeps L - i % 3 positions."""
    mask = torch.zeros(batch, L, dtype=torch.bool)
    for i in range(batch):
        mask[i, L - i % 3:] = True
    return mask


class Call(nn.Module):
    """Calls ``inner`` with keyword masks, as a recommender's forward would."""

    def __init__(self, inner, kind):
        super().__init__()
        self.inner, self.kind = inner, kind

    def forward(self, x, mask=None):
        if self.kind == "padding":
            return self.inner(x, src_key_padding_mask=mask)
        if self.kind == "causal":
            causal = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
            return self.inner(x, src_mask=causal)
        if self.kind == "both":
            causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
            return self.inner(x, src_mask=causal, src_key_padding_mask=mask)
        return self.inner(x)


def _layer(norm_first=False, activation="relu"):
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(D, H, 16, dropout=0.0, activation=activation,
                                      batch_first=True, norm_first=norm_first)


# --------------------------------------------------------------------------- encoder layer

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_traced_fused_matches_onnxruntime(tmp_path, norm_first, activation):
    _roundtrip(Call(_layer(norm_first, activation), "none"), lambda b: (_seq(b),), ["x"],
               tmp_path, kernel=ENCODER_LAYER)


@pytest.mark.parametrize("kind", ["padding", "causal", "both"])
def test_encoder_layer_masked_traced_fused_matches_onnxruntime(tmp_path, kind):
    if kind == "causal":
        _roundtrip(Call(_layer(), kind), lambda b: (_seq(b),), ["x"], tmp_path,
                   kernel=ENCODER_LAYER)
    else:
        _roundtrip(Call(_layer(True, "gelu"), kind), lambda b: (_seq(b), _padding(b)),
                   ["x", "mask"], tmp_path, kernel=ENCODER_LAYER)


def test_encoder_layer_opset14_traced_fused_matches_onnxruntime(tmp_path):
    _roundtrip(Call(_layer(True, "gelu"), "padding"), lambda b: (_seq(b), _padding(b)),
               ["x", "mask"], tmp_path, kernel=ENCODER_LAYER, opset=14)


# --------------------------------------------------------------------------- encoder stack

def _encoder(norm=True, norm_first=False):
    layer = _layer(norm_first)
    return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D) if norm else None,
                                 enable_nested_tensor=not norm_first)


def test_encoder_traced_fused_matches_onnxruntime(tmp_path):
    _roundtrip(Call(_encoder(), "none"), lambda b: (_seq(b),), ["x"], tmp_path,
               kernel=ENCODER_LAYER)


def test_encoder_padding_nested_path_matches_onnxruntime(tmp_path):
    ts, exported = _roundtrip(Call(_encoder(), "padding"), lambda b: (_seq(b), _padding(b)),
                              ["x", "mask"], tmp_path, kernel=NESTED_FROM_MASK)
    assert TO_PADDED in {n.kind() for n in ts.inlined_graph.nodes()}


def test_encoder_norm_first_padding_matches_onnxruntime(tmp_path):
    _roundtrip(Call(_encoder(norm=False, norm_first=True), "padding"),
               lambda b: (_seq(b), _padding(b)), ["x", "mask"], tmp_path,
               kernel=ENCODER_LAYER)


# --------------------------------------------------------------------------- bare attention

class Attend(nn.Module):
    def __init__(self, need_weights=True, average=True, padding=False, causal=False):
        super().__init__()
        torch.manual_seed(0)
        self.mha = nn.MultiheadAttention(D, H, batch_first=True)
        self.need, self.average, self.padding, self.causal = need_weights, average, padding, causal

    def forward(self, x, mask=None):
        attn_mask = (torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
                     if self.causal else None)
        out, weights = self.mha(x, x, x, key_padding_mask=mask if self.padding else None,
                                attn_mask=attn_mask, need_weights=self.need,
                                average_attn_weights=self.average)
        return (out, weights) if self.need else out


@pytest.mark.parametrize("need,average", [(False, True), (True, True), (True, False)])
def test_mha_need_weights_traced_fused_matches_onnxruntime(tmp_path, need, average):
    _roundtrip(Attend(need, average), lambda b: (_seq(b),), ["x"], tmp_path,
               n_out=2 if need else 1, kernel=MULTI_HEAD_ATTENTION)


@pytest.mark.parametrize("need", [False, True])
def test_mha_key_padding_traced_fused_matches_onnxruntime(tmp_path, need):
    _roundtrip(Attend(need, padding=True), lambda b: (_seq(b), _padding(b)), ["x", "mask"],
               tmp_path, n_out=2 if need else 1, kernel=MULTI_HEAD_ATTENTION)


def test_mha_causal_and_padding_traced_fused_matches_onnxruntime(tmp_path):
    _roundtrip(Attend(True, False, padding=True, causal=True),
               lambda b: (_seq(b), _padding(b)), ["x", "mask"], tmp_path, n_out=2,
               kernel=MULTI_HEAD_ATTENTION)


class Kernel(nn.Module):
    """Calls the kernel itself with distinct query / key / value (the kernel allows it)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.mha = nn.MultiheadAttention(D, H, batch_first=True)

    def forward(self, q, kv):
        m = self.mha
        return torch._native_multi_head_attention(
            q, kv, kv * 0.5, D, H, m.in_proj_weight, m.in_proj_bias, m.out_proj.weight,
            m.out_proj.bias, None, True, True, None)


def test_mha_kernel_distinct_qkv_matches_onnxruntime(tmp_path):
    def args(batch):
        return _seq(batch), torch.randn(batch, L, D, generator=torch.Generator().manual_seed(9))

    _roundtrip(Kernel(), args, ["q", "kv"], tmp_path, n_out=2,
               kernel=MULTI_HEAD_ATTENTION)


# --------------------------------------------------------------------------- embedding bag

V, E, W = 12, 4, 5


def _ids(batch, pad=None):
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(0, V, (batch, W), generator=g)
    if pad is not None:
        ids[:, -2:] = pad          # padded tails
        ids[0, :] = pad            # an all-padding bag
    return ids


class Bag(nn.Module):
    def __init__(self, mode, padding_idx=None, weighted=False):
        super().__init__()
        torch.manual_seed(0)
        self.bag = nn.EmbeddingBag(V, E, mode=mode, padding_idx=padding_idx)
        self.weighted = weighted

    def forward(self, ids, weights=None):
        return self.bag(ids, per_sample_weights=weights if self.weighted else None)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_embedding_bag_fixed_width_traced_matches_onnxruntime(tmp_path, mode, padding_idx):
    _, exported = _roundtrip(Bag(mode, padding_idx), lambda b: (_ids(b, padding_idx),),
                             ["ids"], tmp_path, kernel=EMBEDDING_BAG)
    assert "ScatterND" not in {n.op_type for n in exported.graph.node}


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_bag_per_sample_weights_traced_matches_onnxruntime(tmp_path, padding_idx):
    def args(b):
        return _ids(b, padding_idx), torch.rand(b, W, generator=torch.Generator().manual_seed(b))

    _roundtrip(Bag("sum", padding_idx, weighted=True), args, ["ids", "weights"], tmp_path,
               kernel=EMBEDDING_BAG)


class RaggedBag(nn.Module):
    def __init__(self, mode, padding_idx=None, last=False):
        super().__init__()
        torch.manual_seed(0)
        self.bag = nn.EmbeddingBag(V, E, mode=mode, padding_idx=padding_idx,
                                   include_last_offset=last)

    def forward(self, ids, offsets, weights=None):
        return self.bag(ids, offsets, per_sample_weights=weights)


def _ragged(batch, last=False, pad=None):
    """``batch`` bags of lengths 0, 1, 2, 3, 0, 1, ... (empty ones included)."""
    lengths = [i % 4 for i in range(batch)]
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(0, V, (max(sum(lengths), 1),), generator=g)
    if sum(lengths) == 0:
        lengths[-1] = 1
    if pad is not None:
        ids[::3] = pad
    starts = torch.tensor([0] + lengths, dtype=torch.int64).cumsum(0)
    offsets = starts if last else starts[:-1]
    return ids, offsets


@pytest.mark.parametrize("mode,opset", [("sum", 17), ("mean", 17), ("max", 17),
                                        ("mean", 14)])
def test_embedding_bag_ragged_offsets_traced_matches_onnxruntime(tmp_path, mode, opset):
    dynamic = {"ids": {0: "n"}, "offsets": {0: "batch"}}

    def roundtrip(model, make):
        ts = _trace(model, make(3))
        path = tmp_path / "m.onnx"
        exported = _export(ts, make(3), path, ["ids", "offsets"], dynamic=dynamic, opset=opset)
        _check_graph(exported)
        _compare(ts, path, make, ["ids", "offsets"])

    roundtrip(RaggedBag(mode, padding_idx=2), lambda b: _ragged(b, pad=2))
    roundtrip(RaggedBag(mode, last=True), lambda b: _ragged(b, last=True))


# --------------------------------------------------------------------------- registry, report

def test_onnx_symbolics_exit_unregisters_restores_builtin():
    from torch.onnx._internal import registration

    with fused.onnx_symbolics():
        assert registration.registry.is_registered_op(ENCODER_LAYER, 17)
    assert not registration.registry.is_registered_op(ENCODER_LAYER, 17)
    assert not registration.registry.is_registered_op(MULTI_HEAD_ATTENTION, 17)
    group = registration.registry.get_function_group(EMBEDDING_BAG)
    assert group.get(17).__module__ == "torch.onnx.symbolic_opset11"  # the built-in again


def test_fused_kernels_traced_encoder_lists_layers():
    ts = _trace(Call(_encoder(), "none"), (_seq(2),))
    assert fused.fused_kernels(ts) == [(ENCODER_LAYER, "inner.layers.0"),
                                       (ENCODER_LAYER, "inner.layers.1")]
    (entry,) = fused.rewrites(ts)
    assert entry.kind == fused.FUSED_KERNEL_DECOMPOSED
    assert entry.nodes[0] == "inner.layers.0 (aten::_transformer_encoder_layer_fwd)"


def test_fused_kernels_bag_and_attention_named_by_scope():
    bag = _trace(Bag("sum"), (_ids(2),))
    assert fused.fused_kernels(bag) == [(EMBEDDING_BAG, "bag")]
    attend = _trace(Attend(False), (_seq(2),))
    assert fused.fused_kernels(attend) == [(MULTI_HEAD_ATTENTION, "mha")]


def test_fused_kernels_eager_or_unfused_module_empty():
    assert fused.fused_kernels(Bag("sum")) == []
    assert fused.rewrites(Bag("sum")) == []
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        ts = _trace(Call(_layer(), "none"), (_seq(2),))
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    assert fused.fused_kernels(ts) == []


def test_fused_kernels_saved_and_loaded_keeps_module_names(tmp_path):
    path = str(tmp_path / "enc.torchscript")
    _trace(Call(_encoder(), "padding"), (_seq(2), _padding(2))).save(path)
    loaded = torch.jit.load(path)
    assert fused.fused_kernels(loaded) == [(ENCODER_LAYER, "inner.layers.0"),
                                           (ENCODER_LAYER, "inner.layers.1")]
