"""The ``torch_nn`` catalog family (see ``catalog.py``): recommender and sequence
nets written with torch.nn (EmbeddingBag, PReLU, einsum attention,
scatter_add/index_add, cumsum, torch.where, ConvTranspose2d, GroupNorm +
depthwise-separable convs, F.interpolate, DIN, SASRec, LSTM/GRU, a LLaMA-style
block; and from catalog_torch_nn_patterns.py a spatial transformer, an STFT
front-end, MultiheadAttention cross-attention with weights, a
TransformerDecoder, a GCN over an edge list), their declared inputs
and outputs (:data:`TORCH_NN`) and :func:`build_torch_nn`. Each class is handed
over as ``catalog:Class`` (``catalog`` re-exports them).
"""
from __future__ import annotations

import math
from typing import Dict

import torch
import torch.nn.functional as F
from catalog_base import SEED, SEQ_LEN, Built
from catalog_torch_nn_patterns import (
    CrossAttentionWithWeights,
    EdgeListGCN,
    SpatialTransformer,
    StftFrontEnd,
    TinyTransformerDecoder,
)
from torch import nn


class BagRecommender(nn.Module):
    """Three fixed-width EmbeddingBags (sum, mean, max) over a row of ids -> MLP -> score."""

    def __init__(self, items: int = 1000, dim: int = 16, width: int = 5):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(items, dim, mode=m)
                                  for m in ("sum", "mean", "max"))
        self.mlp = nn.Sequential(nn.Linear(3 * dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, ids):
        return self.mlp(torch.cat([bag(ids) for bag in self.bags], dim=1))


class PReLUConvNet(nn.Module):
    """Conv blocks with per-channel nn.PReLU(C) and a single-parameter nn.PReLU()."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.act1 = nn.PReLU(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.act2 = nn.PReLU()
        self.head = nn.Linear(32, classes)
        self.act3 = nn.PReLU(classes)

    def forward(self, image):
        x = self.act2(self.conv2(self.act1(self.conv1(image))))
        return self.act3(self.head(x.mean(dim=(2, 3))))


class EinsumAttention(nn.Module):
    """Multi-head attention written with torch.einsum over token embeddings."""

    def __init__(self, vocab: int = 500, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, tokens):
        x = self.embed(tokens)
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).unbind(2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // self.heads)
        out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(b, n, d)
        return self.proj(out).mean(dim=1)


class ScatterPool(nn.Module):
    """Token embeddings summed into per-row buckets with scatter_add, and features grouped
    with index_add."""

    def __init__(self, vocab: int = 500, dim: int = 16, buckets: int = 4):
        super().__init__()
        self.buckets = buckets
        self.embed = nn.Embedding(vocab, dim)
        self.register_buffer("groups", torch.arange(dim) % 4)
        self.head = nn.Linear(buckets * 4, 1)

    def forward(self, tokens, bucket):
        x = self.embed(tokens)  # [b, n, d]
        index = bucket.unsqueeze(-1).expand(-1, -1, x.shape[-1])
        pooled = torch.zeros(x.shape[0], self.buckets, x.shape[-1], dtype=x.dtype)
        pooled = pooled.scatter_add(1, index, x)  # [b, buckets, d]
        grouped = torch.zeros(x.shape[0], self.buckets, 4, dtype=x.dtype)
        grouped = grouped.index_add(2, self.groups, pooled)  # [b, buckets, 4]
        return self.head(grouped.flatten(1))


class CumsumSession(nn.Module):
    """Running session features: cumulative sums of item embeddings and of dwell times."""

    def __init__(self, items: int = 500, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(items, dim)
        self.head = nn.Linear(dim + 1, 1)

    def forward(self, items, dwell):
        e = self.embed(items)
        steps = torch.arange(1, items.shape[1] + 1, dtype=e.dtype).reshape(1, -1, 1)
        running = e.cumsum(dim=1) / steps
        total = dwell.cumsum(dim=1).unsqueeze(-1)
        return self.head(torch.cat([running, total], dim=-1)).squeeze(-1)


class WhereGate(nn.Module):
    """torch.where masking of padding ids (id 0) and a gated choice between two branches."""

    def __init__(self, items: int = 500, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(items, dim)
        self.a = nn.Linear(dim, dim)
        self.b = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, items):
        e = self.embed(items)
        keep = (items != 0).unsqueeze(-1)
        e = torch.where(keep, e, torch.zeros_like(e))
        a, b = self.a(e), self.b(e)
        mixed = torch.where(a > b, a, b * 0.5)
        count = keep.sum(dim=1).clamp(min=1).to(e.dtype)
        return self.head(mixed.sum(dim=1) / count)


class TinyUNet(nn.Module):
    """Two-level U-Net: ConvTranspose2d upsampling with skip concatenation."""

    def __init__(self, classes: int = 3, width: int = 8):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

        self.down1, self.down2 = block(3, width), block(width, 2 * width)
        self.bottom = block(2 * width, 4 * width)
        self.up2 = nn.ConvTranspose2d(4 * width, 2 * width, 2, stride=2)
        self.dec2 = block(4 * width, 2 * width)
        self.up1 = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.dec1 = block(2 * width, width)
        self.out = nn.Conv2d(width, classes, 1)

    def forward(self, image):
        d1 = self.down1(image)
        d2 = self.down2(F.max_pool2d(d1, 2))
        b = self.bottom(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], dim=1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], dim=1))
        return self.out(u1)


class SeparableGroupNormNet(nn.Module):
    """Depthwise-separable convs (groups=C, then 1x1) with GroupNorm."""

    def __init__(self, classes: int = 10):
        super().__init__()
        layers, c = [nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU()], 16
        for o in (32, 64):
            layers += [nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c), nn.GroupNorm(4, c),
                       nn.SiLU(), nn.Conv2d(c, o, 1), nn.GroupNorm(8, o), nn.SiLU()]
            c = o
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, classes)

    def forward(self, image):
        return self.head(self.features(image).mean(dim=(2, 3)))


class InterpolateFPN(nn.Module):
    """A small feature pyramid: F.interpolate nearest (scale 2) and bilinear (to a size)."""

    def __init__(self, classes: int = 4):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.lat = nn.Conv2d(8, 8, 1)
        self.out = nn.Conv2d(8, classes, 3, padding=1)

    def forward(self, image):
        f1 = torch.relu(self.c1(image))
        f2 = torch.relu(self.c2(f1))
        p1 = self.lat(f1) + F.interpolate(f2, scale_factor=2.0, mode="nearest")
        y = self.out(p1)
        return F.interpolate(y, size=(image.shape[2], image.shape[3]), mode="bilinear",
                             align_corners=False)


class DINRecommender(nn.Module):
    """Deep Interest Network: target attention over the behaviour history (nn.PReLU MLPs)."""

    def __init__(self, items: int = 1000, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(items, dim, padding_idx=0)
        self.att = nn.Sequential(nn.Linear(4 * dim, 32), nn.PReLU(), nn.Linear(32, 1))
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 32), nn.PReLU(32), nn.Linear(32, 1))

    def forward(self, history, item):
        h = self.embed(history)  # [b, n, d]
        t = self.embed(item).unsqueeze(1).expand_as(h)
        w = self.att(torch.cat([h, t, h - t, h * t], dim=-1)).squeeze(-1)  # [b, n]
        w = w.masked_fill(history == 0, -1e9).softmax(dim=-1)
        interest = (w.unsqueeze(-1) * h).sum(dim=1)
        return torch.sigmoid(self.mlp(torch.cat([interest, self.embed(item)], dim=-1)))


class SASRec(nn.Module):
    """Self-attentive sequential recommendation: nn.TransformerEncoder with a causal mask,
    scores for every item from the last position."""

    def __init__(self, items: int = 500, dim: int = 32, heads: int = 2, layers: int = 2,
                 length: int = 10):
        super().__init__()
        self.items = nn.Embedding(items, dim, padding_idx=0)
        self.pos = nn.Embedding(length, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.register_buffer("causal", torch.triu(torch.full((length, length), float("-inf")),
                                                  diagonal=1))

    def forward(self, history):
        positions = torch.arange(history.shape[1]).unsqueeze(0)
        x = self.items(history) * math.sqrt(self.items.embedding_dim) + self.pos(positions)
        x = self.norm(self.encoder(x, mask=self.causal))
        return x[:, -1] @ self.items.weight.t()


class RecurrentTagger(nn.Module):
    """Token ids -> 2-layer LSTM -> GRU -> per-token tags and a sequence score."""

    def __init__(self, vocab: int = 500, dim: int = 16, hidden: int = 24, tags: int = 5):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.gru = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.tags = nn.Linear(2 * hidden, tags)

    def forward(self, tokens):
        x, _ = self.lstm(self.embed(tokens))
        x, _ = self.gru(x)
        return self.tags(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaBlock(nn.Module):
    """A LLaMA-style decoder: RMSNorm, rotary position embedding, a causal mask built by slice
    assignment, SwiGLU MLP; token ids -> next-token logits."""

    def __init__(self, vocab: int = 256, dim: int = 32, heads: int = 4, layers: int = 2,
                 length: int = SEQ_LEN):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            self.layers.append(nn.ModuleDict({
                "n1": RMSNorm(dim), "qkv": nn.Linear(dim, 3 * dim, bias=False),
                "o": nn.Linear(dim, dim, bias=False), "n2": RMSNorm(dim),
                "gate": nn.Linear(dim, 64, bias=False), "up": nn.Linear(dim, 64, bias=False),
                "down": nn.Linear(64, dim, bias=False)}))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = torch.outer(torch.arange(length).float(), inv)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rotate(self, x):  # x: [b, h, n, d]
        n = x.shape[2]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        cos, sin = self.cos[:n], self.sin[:n]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)

    def forward(self, tokens):
        b, n = tokens.shape
        mask = torch.zeros(n, n)
        for i in range(n - 1):  # (an empty last slice would export as a broken Reshape)
            mask[i, i + 1:] = float("-inf")
        x = self.embed(tokens)
        for layer in self.layers:
            h = layer["n1"](x)
            q, k, v = layer["qkv"](h).reshape(b, n, 3, self.heads, self.head_dim).permute(
                2, 0, 3, 1, 4)
            q, k = self.rotate(q), self.rotate(k)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
            out = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, n, -1)
            x = x + layer["o"](out)
            h = layer["n2"](x)
            x = x + layer["down"](F.silu(layer["gate"](h)) * layer["up"](h))
        return self.lm_head(self.norm(x))


# name -> (class, kwargs, inputs, outputs)
TORCH_NN: Dict[str, tuple] = {
    "embedding_bag_recommender": (BagRecommender, {}, ["ids:int64:-1,5:0..999"], ["score"]),
    "prelu_convnet": (PReLUConvNet, {}, ["image:float32:-1,3,16,16"], ["logits"]),
    "einsum_attention": (EinsumAttention, {}, [f"tokens:int64:-1,{SEQ_LEN}:0..499"],
                         ["embedding"]),
    "scatter_index_add": (ScatterPool, {}, [f"tokens:int64:-1,{SEQ_LEN}:0..499",
                                            f"bucket:int64:-1,{SEQ_LEN}:0..3"], ["score"]),
    "cumsum_session": (CumsumSession, {}, ["items:int64:-1,10:0..499",
                                           "dwell:float32:-1,10:0..1"], ["scores"]),
    "where_gate": (WhereGate, {}, ["items:int64:-1,10:0..499"], ["score"]),
    "unet_convtranspose": (TinyUNet, {}, ["image:float32:-1,3,32,32"], ["mask"]),
    "groupnorm_separable": (SeparableGroupNormNet, {}, ["image:float32:-1,3,32,32"],
                            ["logits"]),
    "interpolate_fpn": (InterpolateFPN, {}, ["image:float32:-1,3,32,32"], ["mask"]),
    "din_target_attention": (DINRecommender, {}, ["history:int64:-1,10:0..999",
                                                  "item:int64:-1:1..999"], ["ctr"]),
    "sasrec_transformer": (SASRec, {}, ["history:int64:-1,10:1..499"], ["scores"]),
    "lstm_gru_tagger": (RecurrentTagger, {}, ["tokens:int64:-1,12:0..499"], ["tags"]),
    "llama_block": (LlamaBlock, {}, [f"tokens:int64:-1,{SEQ_LEN}:0..255"], ["logits"]),
    "spatial_transformer": (SpatialTransformer, {}, ["image:float32:-1,3,24,24"], ["logits"]),
    "stft_front_end": (StftFrontEnd, {}, ["wave:float32:-1,800"], ["logits"]),
    "mha_cross_attention_weights": (CrossAttentionWithWeights, {},
                                    [f"query:float32:-1,{SEQ_LEN},32",
                                     "memory:float32:-1,11,32"], ["out", "weights"]),
    "transformer_decoder": (TinyTransformerDecoder, {}, [f"tokens:int64:-1,{SEQ_LEN}:0..255",
                                                         "memory:float32:-1,11,32"],
                            ["logits"]),
    "gcn_edge_list": (EdgeListGCN, {}, ["nodes:float32:-1,12,8", "edges:int64:-1,2,20:0..11"],
                      ["score"]),
}


def _seed_weights(module: nn.Module) -> None:
    """Seeded non-trivial weights: PReLU slopes, norms' affine parameters and BatchNorm
    statistics away from their identity defaults."""
    gen = torch.Generator().manual_seed(SEED + 2)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.PReLU):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) * 0.5)
            elif isinstance(m, (nn.GroupNorm, nn.LayerNorm, RMSNorm,
                                nn.modules.batchnorm._BatchNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=gen))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
                    m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))


def build_torch_nn(name: str) -> Built:
    cls, kwargs, inputs, outputs = TORCH_NN[name]
    torch.manual_seed(SEED)
    module = cls(**kwargs)
    _seed_weights(module)
    module.eval()
    size = ", ".join(f"{s.split(':')[0]}[{s.split(':')[2].replace('-1,', '').replace('-1', '')}]"
                     for s in inputs)
    return Built(module, list(inputs), list(outputs), f"catalog:{cls.__name__}", dict(kwargs),
                 size, sum(p.numel() for p in module.parameters()))
