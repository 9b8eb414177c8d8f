"""Small PyTorch reference models: what the research team hands over.

Used by the demo, the importer's tests and benchmarks/import_models.py. Each is
tiny (seconds to export and convert on a CPU) but exercises the op families
that break converters: Gemm/ReLU (MLP), Conv + BatchNorm on NCHW (CNN),
attention + LayerNorm + GELU (transformer), TopK + GatherElements returning
int64 indices (mixture of experts), and int64 id lookups (embeddings).

The gate of the MoE is written densely (topk -> gather over all experts), the
form that exports to ONNX cleanly; data-dependent routing (nonzero/index)
does not survive tracing.

Example:
  >>> import torch
  >>> from tfx_bridge.pipelines.demo_models import TopKMoE
  >>> scores, experts = TopKMoE()(torch.zeros(2, 16))
  >>> tuple(experts.shape), experts.dtype
  ((2, 2), torch.int64)
"""
from __future__ import annotations

import torch
from torch import nn

from tfx_bridge.pipelines import demo_data


class MLP(nn.Module):
    def __init__(self, in_dim: int = 8, hidden: int = 32, out_dim: int = 3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.Tanh(), nn.Linear(hidden, out_dim))

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    """Conv + BatchNorm on NCHW images [N, 3, 16, 16]."""

    def __init__(self, classes: int = 4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.head = nn.Linear(16, classes)

    def forward(self, image):
        x = self.features(image)
        return self.head(x.mean(dim=(2, 3)))


class TinyTransformer(nn.Module):
    """One encoder block: self-attention, LayerNorm, GELU feed-forward, mean pool."""

    def __init__(self, dim: int = 16, heads: int = 2, seq: int = 6):
        super().__init__()
        self.dim, self.heads, self.seq = dim, heads, seq
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.out = nn.Linear(dim, 1)

    def forward(self, tokens):
        b = tokens.shape[0]
        q, k, v = self.qkv(self.norm1(tokens)).chunk(3, dim=-1)
        hd = self.dim // self.heads

        def split(t):
            return t.reshape(b, self.seq, self.heads, hd).transpose(1, 2)

        att = torch.softmax(split(q) @ split(k).transpose(-1, -2) / hd ** 0.5, dim=-1)
        mixed = (att @ split(v)).transpose(1, 2).reshape(b, self.seq, self.dim)
        x = tokens + self.proj(mixed)
        x = x + self.ff(self.norm2(x))
        return self.out(x.mean(dim=1))


class TopKMoE(nn.Module):
    """A top-k mixture of experts; returns the score and the chosen experts (int64)."""

    def __init__(self, dim: int = 16, experts: int = 4, k: int = 2):
        super().__init__()
        self.k = k
        self.gate = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(
            [nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, 1))
             for _ in range(experts)])

    def forward(self, x):
        logits = self.gate(x)
        top_val, top_idx = torch.topk(logits, self.k, dim=-1)
        weights = torch.softmax(top_val, dim=-1)
        all_out = torch.cat([e(x) for e in self.experts], dim=-1)  # dense: every expert
        chosen = torch.gather(all_out, 1, top_idx)
        score = torch.sigmoid((chosen * weights).sum(dim=-1, keepdim=True))
        return score, top_idx


class EmbeddingModel(nn.Module):
    """int64 user and item ids -> a dot-product score."""

    def __init__(self, users: int = 100, items: int = 50, dim: int = 8):
        super().__init__()
        self.user = nn.Embedding(users, dim)
        self.item = nn.Embedding(items, dim)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, user_id, item_id):
        return (self.user(user_id) * self.item(item_id)).sum(dim=-1, keepdim=True) + self.bias


class CtrMoE(nn.Module):
    """The demo click-through model over demo_data's features.

    item_id and hour arrive as int32 (the demo contract: tf.Example carries
    int64, the serving signature casts), price and user_ctr as float32; a
    top-k mixture of experts scores the click and reports which experts ran.
    """

    def __init__(self, items: int = 1000, dim: int = 8, experts: int = 4, k: int = 2):
        super().__init__()
        self.item = nn.Embedding(items, dim)
        self.hour = nn.Embedding(24, 4)
        self.dense = nn.Linear(dim + 4 + 2, 16)
        self.moe = TopKMoE(dim=16, experts=experts, k=k)

    def forward(self, item_id, hour, price, user_ctr):
        x = torch.cat([self.item(item_id.long()), self.hour(hour.long()),
                       (price / 50.0).unsqueeze(-1), user_ctr.unsqueeze(-1)], dim=-1)
        return self.moe(torch.relu(self.dense(x)))


class CtrTransformed(nn.Module):
    """The demo click model trained inside the pipeline, on Transform's output.

    Reads the transformed features of ``demo_preprocessing`` (``country_id``
    from the vocabulary, ``price_z`` z-scored, ids as int64) and scores the
    click with a top-k mixture of experts, reporting which experts ran.
    ``countries`` is the vocabulary size plus its OOV buckets.
    """

    def __init__(self, countries: int = 7, items: int = 1000, dim: int = 8, experts: int = 4,
                 k: int = 2):
        super().__init__()
        self.item = nn.Embedding(items, dim)
        self.hour = nn.Embedding(24, 4)
        self.country = nn.Embedding(countries, 4)
        self.dense = nn.Linear(dim + 4 + 4 + 4, 16)
        self.moe = TopKMoE(dim=16, experts=experts, k=k)

    def forward(self, item_id, hour, country_id, price_z, user_ctr, item_seen, is_returning):
        flags = torch.stack([price_z, user_ctr * 10.0, item_seen.float(),
                             is_returning.float()], dim=-1)
        x = torch.cat([self.item(item_id), self.hour(hour), self.country(country_id), flags],
                      dim=-1)
        return self.moe(torch.relu(self.dense(x)))


# The demo model's declared signature lives with the demo data (no torch needed to
# build or compile the pipeline); re-exported here beside the model.
CTR_INPUTS = demo_data.CTR_INPUTS
CTR_OUTPUTS = demo_data.CTR_OUTPUTS

# name -> (class, constructor kwargs, input specs, output names)
REFERENCE_MODELS = {
    "mlp": (MLP, {}, ["x:float32:-1,8"], ["logits"]),
    "cnn": (SmallCNN, {}, ["image:float32:-1,3,16,16"], ["logits"]),
    "transformer": (TinyTransformer, {}, ["tokens:float32:-1,6,16"], ["score"]),
    "moe": (TopKMoE, {}, ["x:float32:-1,16"], ["score", "experts"]),
    "embedding": (EmbeddingModel, {}, ["user_id:int64:-1:0..99", "item_id:int64:-1:0..49"],
                  ["score"]),
}


def build(name: str, seed: int = 0) -> nn.Module:
    """A reference model with deterministic weights, in eval mode."""
    cls, kwargs, _, _ = REFERENCE_MODELS[name]
    torch.manual_seed(seed)
    model = cls(**kwargs)
    for m in model.modules():  # non-trivial BatchNorm statistics
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()
