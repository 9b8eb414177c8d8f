"""torch.nn patterns of the ``torch_nn`` catalog family (see ``catalog_torch_nn.py``)
that torch's exporter needed help with in some hand-over form: affine_grid +
grid_sample, an STFT front-end, MultiheadAttention cross-attention returning its
weights and a TransformerDecoder (their TorchScript graphs lose shapes on save),
and a GCN aggregating messages over an edge list with ``index_add``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SpatialTransformer(nn.Module):
    """A spatial transformer: a localisation head predicts theta, F.affine_grid builds the
    sampling grid and F.grid_sample resamples the image, then a classifier."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 6))
        self.register_buffer("identity", torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
        self.head = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes))

    def forward(self, image):
        theta = self.identity + 0.1 * self.loc(image).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(image.shape), align_corners=False)
        return self.head(F.grid_sample(image, grid, align_corners=False))


class StftFrontEnd(nn.Module):
    """An audio front-end: Hann-windowed torch.stft (complex), log power, a mel-like
    linear filterbank, then a GRU over frames."""

    def __init__(self, n_fft: int = 64, bands: int = 16, classes: int = 5):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer("window", torch.hann_window(n_fft))
        self.bank = nn.Linear(n_fft // 2 + 1, bands, bias=False)
        self.gru = nn.GRU(bands, 24, batch_first=True)
        self.head = nn.Linear(24, classes)

    def forward(self, wave):
        spec = torch.stft(wave, self.n_fft, hop_length=self.n_fft // 4, window=self.window,
                          return_complex=True)
        bands = self.bank(torch.log1p(spec.abs().pow(2)).transpose(1, 2))
        return self.head(self.gru(bands)[0][:, -1])


class CrossAttentionWithWeights(nn.Module):
    """nn.MultiheadAttention over another sequence (its slow path), returning the
    averaged attention weights too (need_weights, the default)."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, query, memory):
        return self.attn(query, memory, memory)


class TinyTransformerDecoder(nn.Module):
    """Token embeddings -> nn.TransformerDecoder (causal self-attention, cross-attention
    to a memory) -> vocabulary logits."""

    def __init__(self, vocab: int = 256, dim: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(dim, 4, 64, batch_first=True), 2)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, memory):
        x = self.embed(tokens)
        causal = torch.triu(torch.full((x.shape[1], x.shape[1]), float("-inf")), 1)
        return self.head(self.decoder(x, memory, tgt_mask=causal))


class EdgeListGCN(nn.Module):
    """Message passing over an edge list: each edge's source features, transformed,
    summed into its target node with index_add (repeated targets add up), then a
    readout over nodes."""

    def __init__(self, features: int = 8, hidden: int = 16):
        super().__init__()
        self.message = nn.Linear(features, hidden)
        self.update = nn.Linear(features + hidden, hidden)
        self.readout = nn.Linear(hidden, 1)

    def forward(self, nodes, edges):
        batch, count, _ = nodes.shape
        # The batch's graphs as one: node ids offset by each graph's place.
        offset = (torch.arange(batch) * count).reshape(batch, 1)
        src = (edges[:, 0] + offset).reshape(-1)
        dst = (edges[:, 1] + offset).reshape(-1)
        x = nodes.reshape(batch * count, -1)
        messages = torch.zeros(batch * count, self.message.out_features)
        messages = messages.index_add(0, dst, self.message(x[src]))
        hidden = torch.relu(self.update(torch.cat([x, messages], 1)))
        return self.readout(hidden.reshape(batch, count, -1).mean(1))
