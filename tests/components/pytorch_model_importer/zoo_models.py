"""The zoo's own classes (zoo.py): the shapes torch.nn, torchvision and HF transformers
leave to the user (a DLRM interaction, a text CNN, a recommender bag of ids), a
torchvision builder as a class a state_dict names, and the few modules single tests
hand over. zoo.py re-exports them, so handovers name them "zoo:Class"."""
from __future__ import annotations

import torch
from torch import nn


class ConvPoolFlatten(nn.Module):
    """The classic small classifier: conv blocks, adaptive pooling, flatten, linear."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4, 64), nn.ReLU(),
                                        nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, image):
        return self.classifier(self.pool(self.features(image)))


class TextEncoder(nn.Module):
    """Token ids -> nn.TransformerEncoder (eval: PyTorch's fused fast path) -> classes."""

    def __init__(self, vocab: int = 200, dim: int = 32, heads: int = 4, layers: int = 2,
                 classes: int = 3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


class BagOfIds(nn.Module):
    """A recommender tower: fixed-width padded bags of item ids through EmbeddingBag."""

    def __init__(self, items: int = 500, dim: int = 16):
        super().__init__()
        self.mean_bag = nn.EmbeddingBag(items, dim, mode="mean", padding_idx=0)
        self.max_bag = nn.EmbeddingBag(items, dim, mode="max")
        self.sum_bag = nn.EmbeddingBag(items, dim, mode="sum")
        self.out = nn.Linear(3 * dim, 1)

    def forward(self, history, weights):
        pooled = torch.cat([self.mean_bag(history), self.max_bag(history),
                            self.sum_bag(history, per_sample_weights=weights)], dim=1)
        return torch.sigmoid(self.out(pooled))


class RaggedBag(nn.Module):
    """EmbeddingBag over 1-D ids + offsets: ragged bags (exported without a Loop)."""

    def __init__(self, items: int = 100, dim: int = 8):
        super().__init__()
        self.bag = nn.EmbeddingBag(items, dim, mode="sum")

    def forward(self, ids, offsets):
        return self.bag(ids, offsets)


class DLRM(nn.Module):
    """DLRM-style: bottom MLP, embeddings, pairwise dot interaction (bmm + triu), top MLP."""

    def __init__(self, dense: int = 8, tables: int = 3, rows: int = 100, dim: int = 16):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 32), nn.ReLU(), nn.Linear(32, dim),
                                    nn.ReLU())
        self.embeddings = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(tables))
        n = tables + 1
        self.register_buffer("li", torch.triu_indices(n, n, offset=1)[0], persistent=False)
        self.register_buffer("lj", torch.triu_indices(n, n, offset=1)[1], persistent=False)
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 32), nn.ReLU(),
                                 nn.Linear(32, 1))

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        vectors = [x] + [emb(sparse[:, i]) for i, emb in enumerate(self.embeddings)]
        t = torch.stack(vectors, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))
        pairs = z[:, self.li, self.lj]
        return torch.sigmoid(self.top(torch.cat([x, pairs], dim=1)))


class RecurrentText(nn.Module):
    """Token ids -> bidirectional LSTM -> GRU -> last step -> classes."""

    def __init__(self, vocab: int = 200, dim: int = 16, hidden: int = 24, classes: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(2 * hidden, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, tokens):
        x, _ = self.lstm(self.embed(tokens))
        x, _ = self.gru(x)
        return self.head(x[:, -1])


class TextCNN(nn.Module):
    """Kim-style text CNN: 1-D convolutions of widths 2/3/4, max over time."""

    def __init__(self, vocab: int = 200, dim: int = 16, channels: int = 8, classes: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.convs = nn.ModuleList(nn.Conv1d(dim, channels, k) for k in (2, 3, 4))
        self.head = nn.Linear(3 * channels, classes)

    def forward(self, tokens):
        x = self.embed(tokens).transpose(1, 2)
        pooled = [torch.relu(conv(x)).amax(dim=2) for conv in self.convs]
        return self.head(torch.cat(pooled, dim=1))


class BertClassifier(nn.Module):
    """HF transformers BertModel (tiny config) with an attention mask, pooled -> classes."""

    def __init__(self, vocab: int = 300, hidden: int = 32, layers: int = 2, heads: int = 4,
                 classes: int = 3):
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                            num_attention_heads=heads, intermediate_size=2 * hidden,
                            max_position_embeddings=64, attn_implementation="eager")
        self.bert = BertModel(config)
        self.head = nn.Linear(hidden, classes)

    def forward(self, input_ids, attention_mask):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, self.head(out.pooler_output)


class VisionTransformer(nn.Module):
    """HF transformers ViTModel (tiny config): image -> last hidden state (CLS + patches)."""

    def __init__(self, image: int = 32, patch: int = 8, hidden: int = 32):
        super().__init__()
        from transformers import ViTConfig, ViTModel

        config = ViTConfig(image_size=image, patch_size=patch, hidden_size=hidden,
                           num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=2 * hidden, attn_implementation="eager")
        self.vit = ViTModel(config, add_pooling_layer=False)

    def forward(self, pixel_values):
        return self.vit(pixel_values).last_hidden_state


class SpeechEncoder(nn.Module):
    """HF transformers Wav2Vec2Model (tiny config): waveform -> frame features (strided
    1-D convolutions, a grouped positional convolution, attention)."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        from transformers import Wav2Vec2Config, Wav2Vec2Model

        config = Wav2Vec2Config(hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=2 * hidden, conv_dim=(32, 32),
                                conv_kernel=(8, 8), conv_stride=(8, 5),
                                num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                                attn_implementation="eager")
        self.wav2vec2 = Wav2Vec2Model(config)

    def forward(self, input_values):
        return self.wav2vec2(input_values).last_hidden_state


class VideoNet(nn.Module):
    """torchvision's VideoResNet (R(2+1)D blocks, one per stage): clip [3, T, H, W] ->
    logits."""

    def __init__(self, classes: int = 5):
        super().__init__()
        from torchvision.models.video.resnet import (
            BasicBlock,
            Conv2Plus1D,
            R2Plus1dStem,
            VideoResNet,
        )

        self.net = VideoResNet(BasicBlock, [Conv2Plus1D] * 4, [1, 1, 1, 1], R2Plus1dStem,
                               num_classes=classes)

    def forward(self, clip):
        return self.net(clip)


class BatchLoop(nn.Module):
    """Loops over the batch in Python (GPTSAN's per-row position embeddings): the
    trace unrolls the loop for the export sample's batch."""

    def __init__(self, mix_rows: bool = False):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.mix_rows = mix_rows  # each row reads the next one too: rows not independent

    def forward(self, x):
        n = x.shape[0]
        rows = [self.lin(x[i] + (x[(i + 1) % n] if self.mix_rows else 0.0)) for i in range(n)]
        return torch.stack(rows)


class PairedBatchLoop(BatchLoop):
    """BatchLoop over frames that come in pairs (X-CLIP's clips of ``num_frames``): an
    odd batch is refused by the model's own code, so it cannot export for one row."""

    def forward(self, x):
        if x.shape[0] % 2:
            raise ValueError(f"frames come in pairs, got a batch of {x.shape[0]}")
        return super().forward(x)


class TorchvisionNet(nn.Module):
    """A torchvision classifier by builder name (``weights=None``, 10 classes, half width
    where the builder takes one), as a class a state_dict hand-over can name."""

    def __init__(self, name: str = "mobilenet_v3_small"):
        super().__init__()
        import torchvision

        extra = {"width_mult": 0.5} if name.startswith("mobilenet") else {}
        self.net = torchvision.models.get_model(name, weights=None, num_classes=10, **extra)

    def forward(self, image):
        return self.net(image)


class _PoolWithIndices(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2, return_indices=True)

    def forward(self, x):
        y, i = self.pool(x)
        return y.sum(dim=(2, 3)) + i.float().mean(dim=(2, 3))


class PoolIndicesNet(nn.Module):
    """Max pooling that returns its indices (an op variant the converter refuses on
    dynamic spatial sizes), inside a nested module."""

    def __init__(self):
        super().__init__()
        self.features = _PoolWithIndices()

    def forward(self, image):
        return self.features(image)


class NoisyHead(nn.Module):
    """A linear head that adds Gaussian noise in its forward, as VITS's flow and a
    sampling head do: stochastic unless ``noise_scale`` is 0."""

    def __init__(self, noise_scale: float = 0.5):
        super().__init__()
        self.noise_scale = noise_scale
        self.proj = nn.Linear(6, 4)
        self.sampler = nn.Identity()

    def forward(self, x):
        h = self.proj(x)
        return h + self.sampler(torch.randn_like(h)) * self.noise_scale
