"""Whole model catalogs for the importer benchmark (``import_models.py --catalog``).

Three families, every model built offline with seeded random weights:

- ``torchvision``: every classification builder of ``torchvision.models`` and
  every segmentation builder, ``weights=None`` (and ``weights_backbone=None``),
  at the smallest square input of :data:`SIZES` where torch's own float32
  output holds the tolerance against float64 (:data:`SIZE_RULE`); models
  over :data:`MAX_PARAMS` parameters are skipped.
  BatchNorm statistics are calibrated on random images (a few train-mode
  forwards), so activations keep a trained model's scale.
- ``transformers``: every ``AutoModel`` architecture whose main input is
  ``input_ids``, from a tiny config (hidden 32, 2 layers, 2 heads,
  intermediate 37, vocabulary 99) as transformers' own tests build them:
  encoders, decoders (``use_cache=False``) and the encoder half of
  encoder-decoders, taking ``input_ids`` and ``attention_mask`` [batch, 8] and
  returning the last hidden state.
- ``torch_nn``: recommender and sequence nets written with torch.nn
  (EmbeddingBag, PReLU, einsum attention, scatter_add/index_add, cumsum,
  torch.where, ConvTranspose2d, GroupNorm + depthwise-separable convs,
  F.interpolate, DIN, SASRec, LSTM/GRU, a LLaMA-style block).

Each model is handed over as a state_dict + ``catalog:Class`` (with kwargs;
``benchmarks/`` must be on sys.path, as ``import_models.py`` puts it), a
TorchScript file (``torch.jit.trace`` in eval + no_grad) or an ONNX file
(``torch.onnx.export``, opset 17, dynamic batch), as a user would.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import os
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

FAMILIES = ("torchvision", "transformers", "torch_nn")
FORMS = ("state_dict", "torchscript", "onnx")
SIZES = (32, 64, 96, 128, 160, 224, 299)
MAX_PARAMS = 100_000_000
SEQ_LEN = 8
TINY_VOCAB = 99
SEED = 0
# How BatchNorm statistics of the torchvision models are set (recorded in each row).
CALIBRATION = "bn-train-only 2x16"
# Input size: random deep nets at tiny inputs (late stages at 1x1) can be so
# ill-conditioned that torch's own float32 output misses float64 by more than
# the tolerance (EfficientNet-B4 at 32x32: 0.7% of the output's scale; 1e-5 at
# 128x128). The size is picked before conversion, from torch alone.
SIZE_RULE = ("smallest size where torch float32 is within half the tolerance of "
             "float64 (batches 7 and 32), up to 224; else the smallest that runs")
STABILITY_BATCHES = (7, 32)
MAX_STABLE_SIZE = 224


class NotBuilt(Exception):
    """The architecture cannot be built (or run) from the catalog's config: not a converter
    failure."""


class Skipped(Exception):
    """Deliberately left out: too large."""


class Excluded(Exception):
    """Not part of the family: a transformers architecture whose main input is not
    ``input_ids``."""


@dataclasses.dataclass
class Built:
    """A built model and how it is declared and handed over."""

    module: nn.Module
    inputs: List[str]  # importer specs, name:dtype:shape[:lo..hi]
    outputs: List[str]
    module_class: str
    module_kwargs: dict
    input_size: str
    params: int


# =================================================================== torchvision


def torchvision_names() -> List[str]:
    import torchvision

    names = [f"{n}" for n in torchvision.models.list_models(module=torchvision.models)]
    names += [f"{n}" for n in
              torchvision.models.list_models(module=torchvision.models.segmentation)]
    return names


def _is_segmentation(name: str) -> bool:
    import torchvision

    return name in torchvision.models.list_models(module=torchvision.models.segmentation)


def _torchvision_builder(name: str):
    import torchvision

    if _is_segmentation(name):
        fn = torchvision.models.get_model_builder(name)
        return lambda: fn(weights=None, weights_backbone=None)
    fn = torchvision.models.get_model_builder(name)
    return lambda: fn(weights=None)


class TorchvisionModel(nn.Module):
    """A torchvision builder with ``weights=None``; segmentation models return ``out``."""

    def __init__(self, name: str):
        super().__init__()
        self.segmentation = _is_segmentation(name)
        self.model = _torchvision_builder(name)()

    def forward(self, image):
        out = self.model(image)
        if self.segmentation:
            return out["out"]
        if isinstance(out, tuple):  # GoogLeNet / Inception outputs in train mode only
            return out[0]
        return out


def count_params_meta(name: str) -> int:
    """Parameters of a torchvision architecture, built on the meta device (no memory);
    builders that read tensor values while they build (RegNet's width rounding) are
    built for real."""
    try:
        with torch.device("meta"):
            model = _torchvision_builder(name)()
    except (NotImplementedError, RuntimeError):  # "Cannot copy out of meta tensor"
        model = _torchvision_builder(name)()
    return sum(p.numel() for p in model.parameters())


def calibrate_batchnorm(module: nn.Module, make_batch: Callable[[], tuple], steps: int = 2
                        ) -> None:
    """BatchNorm running statistics from forwards on random inputs (cumulative average),
    so a randomly initialised deep net keeps a trained net's activation scale.

    Only the BatchNorm layers run in train mode; the rest stays in eval: the
    statistics are those of the eval-mode net (stochastic depth and dropout
    off, as in EfficientNet: calibrated with them on, the eval net's
    activations blow up), and train-only heads (Inception's auxiliary
    classifier) never run.
    """
    bns = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    saved = [m.momentum for m in bns]
    module.eval()
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    with torch.no_grad():
        for _ in range(steps):
            module(*make_batch())
    for m, mom in zip(bns, saved, strict=True):
        m.momentum = mom
    module.eval()


def runnable_sizes(module: nn.Module, sizes=SIZES) -> List[int]:
    """The sizes of ``sizes`` the architecture accepts, smallest first."""
    ok = []
    for size in sizes:
        try:
            with torch.no_grad():
                module(torch.zeros(1, 3, size, size))
            ok.append(size)
        except Exception:  # noqa: BLE001 (too small for this architecture)
            continue
    if not ok:
        raise NotBuilt(f"no input size in {list(sizes)} runs")
    return ok


def float32_holds(module: nn.Module, inputs: List[str],
                  batches: Sequence[int] = STABILITY_BATCHES) -> bool:
    """Whether torch's own float32 output is within half the catalog's tolerance
    (1e-4, relative to the output's scale above 1) of the same model run in float64,
    on the importer's verification inputs at each of ``batches``.

    Half: the check compares two float32 computations (torch's and the
    SavedModel's), each off the exact math by its own rounding; the two can
    differ by the sum. A reference that alone uses up the tolerance cannot
    check a float32 converter at it. Every verification batch but 1 is tried:
    the inputs differ per batch, and an ill-conditioned net can hold on some
    and miss on others (EfficientNet-B1 at 32x32: 7 rows hold, 32 do not).
    """
    import copy

    from tfx_bridge.components.pytorch_model_importer import signature

    specs = signature.parse_input_specs(inputs)
    wide = copy.deepcopy(module).double()
    for batch in batches:
        args = [torch.from_numpy(v) for v in signature.make_inputs(specs, batch).values()]
        with torch.no_grad():
            fp32 = module(*args)
            fp64 = wide(*[a.double() for a in args])
        scale = float(fp32.abs().max())
        if float((fp32.double() - fp64).abs().max()) > 0.5e-4 * max(1.0, scale):
            return False
    return True


def _seeded_torchvision(name: str, size: int) -> nn.Module:
    torch.manual_seed(SEED)
    module = TorchvisionModel(name).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    calibrate_batchnorm(module, lambda: (torch.rand(16, 3, size, size, generator=gen) * 2 - 1,))
    return module


def build_torchvision(name: str, size: Optional[int] = None) -> Built:
    """The seeded, calibrated model at ``size``, or at the size :data:`SIZE_RULE` picks."""
    params = count_params_meta(name)
    if params > MAX_PARAMS:
        raise Skipped(f"{params / 1e6:.0f}M parameters (over {MAX_PARAMS // 1_000_000}M)")
    spec = lambda s: [f"image:float32:-1,3,{s},{s}"]  # noqa: E731
    if size is None:
        torch.manual_seed(SEED)
        runs = runnable_sizes(TorchvisionModel(name).eval())
        size = runs[0]
        for s in (s for s in runs if s <= MAX_STABLE_SIZE):
            if float32_holds(_seeded_torchvision(name, s), spec(s)):
                size = s
                break
    module = _seeded_torchvision(name, size)
    out = "out" if module.segmentation else "logits"
    return Built(module, spec(size), [out], "catalog:TorchvisionModel",
                 {"name": name}, f"3x{size}x{size}", params)


# =================================================================== transformers

# Canonical tiny sizes and the parameter names config classes give them.
_TINY = {
    "hidden": (32, ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "n_embed", "emb_dim",
                    "model_dim", "d_embed", "hidden_dim_model")),
    "layers": (2, ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers",
                   "decoder_layers", "num_encoder_layers", "num_decoder_layers")),
    "heads": (2, ("num_attention_heads", "n_head", "num_heads", "n_heads",
                  "encoder_attention_heads", "decoder_attention_heads", "num_key_value_heads",
                  "n_kv_heads", "multi_query_group_num")),
    "inner": (37, ("intermediate_size", "d_ff", "n_inner", "ffn_dim", "encoder_ffn_dim",
                   "decoder_ffn_dim", "ffn_hidden_size", "moe_intermediate_size",
                   "shared_expert_intermediate_size", "d_inner", "filter_size")),
    "vocab": (TINY_VOCAB, ("vocab_size", "n_token", "ntoken")),
    "embedding": (32, ("embedding_size", "word_embed_proj_dim", "d_embed_word")),
    "head_dim": (16, ("head_dim", "d_kv", "kv_channels", "d_head", "attention_head_size")),
    "positions": (128, ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len",
                        "seq_length", "max_sequence_length")),
}
# Per architecture corrections, as transformers' own model testers set them.
_TINY_OVERRIDES: Dict[str, dict] = {
    "distilbert": {"hidden_dim": 37},
    "funnel": {"block_sizes": [1, 1], "num_decoder_layers": 1, "d_head": 16},
    "reformer": {"attn_layers": ["local", "lsh"], "axial_pos_shape": [2, 4],
                 "axial_pos_embds_dim": [16, 16], "local_attn_chunk_length": 4,
                 "lsh_attn_chunk_length": 4, "num_buckets": 2, "feed_forward_size": 37,
                 "attention_head_size": 16, "is_decoder": True},
    "transfo-xl": {"cutoffs": [10, 50], "div_val": 1, "d_embed": 32, "mem_len": 0},
    "longformer": {"attention_window": 4},
    "led": {"attention_window": 4},
    "big_bird": {"attention_type": "original_full"},
    "bigbird_pegasus": {"attention_type": "original_full"},
    "xlnet": {"mem_len": None},
    "nezha": {"max_relative_position": 16},
    "mega": {"ema_projection_size": 4, "shared_representation_size": 16},
    "mamba": {"state_size": 4, "expand": 2},
    "mamba2": {"state_size": 4, "expand": 2, "n_groups": 1, "head_dim": 16, "num_heads": 4},
    "rwkv": {"attention_hidden_size": 32},
    "fsmt": {"src_vocab_size": TINY_VOCAB, "tgt_vocab_size": TINY_VOCAB},
    "xlm-prophetnet": {"ngram": 2},
    "prophetnet": {"ngram": 2},
    "canine": {"num_hash_buckets": 16, "num_hash_functions": 2},
    "gpt_neo": {"attention_types": [[["global", "local"], 1]], "window_size": 4},
    "jamba": {"use_mamba_kernels": False, "attn_layer_period": 2, "attn_layer_offset": 1,
              "expert_layer_period": 2, "expert_layer_offset": 1, "mamba_d_state": 4,
              "mamba_dt_rank": 4},
    "deberta-v2": {"position_buckets": 16},
    "codegen": {"rotary_dim": 4, "n_head": 4},
    "gptj": {"rotary_dim": 4},
    "dbrx": {"attn_config": {"clip_qkv": 8, "kv_n_heads": 2, "rope_theta": 10000.0},
             "ffn_config": {"ffn_hidden_size": 37, "moe_num_experts": 4, "moe_top_k": 1}},
    "esm": {"pad_token_id": 1, "mask_token_id": 2},
    "moshi": {"ffn_dim": 38},
    "squeezebert": {"intermediate_size": 64},
    "xmod": {"default_language": "en_XX"},
    "luke": {"entity_vocab_size": 10, "entity_emb_size": 32},
}
_TOKEN_ID_FIELDS = ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id",
                    "cls_token_id", "decoder_start_token_id", "unk_token_id", "mask_token_id")


def transformers_names() -> List[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


def _init_params(config_class) -> set:
    params = set()
    for cls in config_class.__mro__:
        if "__init__" in cls.__dict__:
            params |= set(inspect.signature(cls.__dict__["__init__"]).parameters)
        if cls.__name__ == "PretrainedConfig":
            break
    return params


def tiny_config(model_type: str):
    """``AutoConfig.for_model(model_type, ...)`` with tiny sizes under each config's own names."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[model_type]
    accepted = _init_params(config_class)
    kwargs = {}
    for value, names in _TINY.values():
        for n in names:
            if n in accepted:
                kwargs[n] = value
    kwargs.update(_TINY_OVERRIDES.get(model_type, {}))
    for flag in ("use_cache",):
        kwargs[flag] = False
    kwargs.setdefault("hidden_dropout_prob", 0.0)
    config = AutoConfig.for_model(model_type, **kwargs)
    vocab = getattr(config, "vocab_size", TINY_VOCAB) or TINY_VOCAB
    for field in _TOKEN_ID_FIELDS:
        value = getattr(config, field, None)
        if isinstance(value, int) and value >= vocab:
            try:
                setattr(config, field, 1 if field == "pad_token_id" else 2)
            except Exception:  # noqa: BLE001 (a read-only property)
                pass
    if hasattr(config, "_attn_implementation"):
        config._attn_implementation = "eager"  # what torch.onnx.export traces as plain ops
    return config


# Inputs of multimodal and layout architectures (their AutoModel needs more than text).
_NON_TEXT_INPUTS = ("pixel_values", "pixel_values_videos", "input_features", "input_values",
                    "bbox", "image", "images", "pixel_mask", "input_points", "visual_embeds",
                    "spectrogram", "audio_values", "image_embeds")


def _main_input(forward) -> Optional[str]:
    params = [p for p in inspect.signature(forward).parameters if p != "self"]
    return params[0] if params else None


class TransformersModel(nn.Module):
    """``AutoModel.from_config(tiny_config(model_type))`` (its encoder for an encoder-decoder):
    input_ids, attention_mask -> last hidden state."""

    def __init__(self, model_type: str):
        super().__init__()
        from transformers import AutoModel

        config = tiny_config(model_type)
        try:
            model = AutoModel.from_config(config, attn_implementation="eager")
        except (TypeError, ValueError):
            model = AutoModel.from_config(config)
        self.config = config
        self.encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        if self.encoder_decoder and hasattr(model, "get_encoder"):
            model = model.get_encoder()
        self.model = model.eval()
        params = inspect.signature(self.model.forward).parameters
        self.takes_mask = "attention_mask" in params
        self.takes_use_cache = "use_cache" in params
        self.takes_return_dict = "return_dict" in params

    def forward(self, input_ids, attention_mask=None):
        kwargs = {}
        if self.takes_mask:
            kwargs["attention_mask"] = attention_mask
        if self.takes_use_cache:
            kwargs["use_cache"] = False
        if self.takes_return_dict:
            kwargs["return_dict"] = True
        out = self.model(input_ids=input_ids, **kwargs)
        if hasattr(out, "last_hidden_state") and out.last_hidden_state is not None:
            return out.last_hidden_state
        if isinstance(out, (tuple, list)):
            return out[0]
        return out[0] if hasattr(out, "__getitem__") else out


def _check_text_architecture(model_type: str) -> None:
    """Raises Excluded (or NotBuilt) unless AutoModel's class for ``model_type`` takes
    ``input_ids`` first and no image, audio or layout input; builds nothing."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    class_name = MODEL_MAPPING_NAMES.get(model_type)
    if isinstance(class_name, (tuple, list)):
        class_name = class_name[0]
    try:
        cls = getattr(transformers, class_name, None) if class_name else None
    except Exception as e:  # noqa: BLE001 (a class whose optional dependency is missing)
        raise NotBuilt(f"{type(e).__name__}: {_first_line(e)}") from e
    if cls is None:
        raise NotBuilt(f"no AutoModel class for {model_type}")
    main = _main_input(cls.forward)
    if main != "input_ids":
        raise Excluded(f"not a text model: {class_name}.forward takes {main} first")
    other = [p for p in inspect.signature(cls.forward).parameters if p in _NON_TEXT_INPUTS]
    if other:
        raise Excluded(f"multimodal: {class_name}.forward also takes {', '.join(other)}")


def precheck(family: str, name: str) -> None:
    """The cheap part of :func:`build`, for the runner's own process: raises Excluded,
    Skipped or NotBuilt for a model that would not be converted (no weights built)."""
    if family == "transformers":
        _check_text_architecture(name)
    elif family == "torchvision":
        params = count_params_meta(name)
        if params > MAX_PARAMS:
            raise Skipped(f"{params / 1e6:.0f}M parameters (over {MAX_PARAMS // 1_000_000}M)")


def build_transformers(model_type: str) -> Built:
    _check_text_architecture(model_type)
    torch.manual_seed(SEED)
    try:
        module = TransformersModel(model_type).eval()
    except Exception as e:  # noqa: BLE001
        raise NotBuilt(f"{type(e).__name__}: {_first_line(e)}") from e
    if module.encoder_decoder:
        main = _main_input(module.model.forward)
        if main != "input_ids":
            raise Excluded(f"not a text model: its encoder takes {main} first")
    vocab = getattr(module.config, "vocab_size", TINY_VOCAB) or TINY_VOCAB
    hi = min(TINY_VOCAB, vocab) - 1
    ids = torch.randint(3, hi + 1, (2, SEQ_LEN), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, SEQ_LEN, dtype=torch.int64)
    try:
        with torch.no_grad():
            out = module(ids, mask)
    except Exception as e:  # noqa: BLE001
        raise NotBuilt(f"forward on a tiny config fails: {type(e).__name__}: "
                       f"{_first_line(e)}") from e
    if not isinstance(out, torch.Tensor) or out.dim() < 2:
        raise NotBuilt(f"no last hidden state tensor (got {type(out).__name__})")
    params = sum(p.numel() for p in module.parameters())
    inputs = [f"input_ids:int64:-1,{SEQ_LEN}:3..{hi}"]
    if module.takes_mask:
        inputs.append(f"attention_mask:int64:-1,{SEQ_LEN}:1..1")
    return Built(module, inputs,
                 ["last_hidden_state"], "catalog:TransformersModel", {"model_type": model_type},
                 f"seq {SEQ_LEN}", params)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


# =================================================================== torch.nn models


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


# =================================================================== catalog


def names(family: str) -> List[str]:
    if family == "torchvision":
        return torchvision_names()
    if family == "transformers":
        return transformers_names()
    if family == "torch_nn":
        return list(TORCH_NN)
    raise ValueError(f"unknown family {family!r}: use one of {FAMILIES}")


def build(family: str, name: str, size: Optional[int] = None) -> Built:
    """The seeded model (raises NotBuilt / Skipped)."""
    if family == "torchvision":
        return build_torchvision(name, size)
    if family == "transformers":
        return build_transformers(name)
    return build_torch_nn(name)


def hand_over(built: Built, form: str, folder: str, name: str):
    """The file a user would hand over, written to ``folder``: a convert.ModelSource."""
    from tfx_bridge.components.pytorch_model_importer import convert, signature

    specs = signature.parse_input_specs(built.inputs)
    safe = name.replace("/", "_")
    if form == "state_dict":
        path = os.path.join(folder, f"{safe}.pt")
        torch.save(built.module.state_dict(), path)
        return convert.ModelSource("state_dict", path, built.module_class, built.module_kwargs)
    sample = tuple(torch.from_numpy(v) for v in signature.make_inputs(specs, 3).values())
    if form == "torchscript":
        path = os.path.join(folder, f"{safe}.torchscript")
        with torch.no_grad():
            torch.jit.trace(built.module.eval(), sample, check_trace=False).save(path)
        return convert.ModelSource("torchscript", path)
    if form == "onnx":
        path = os.path.join(folder, f"{safe}.onnx")
        names_in = [s.name for s in specs]
        with torch.no_grad():
            torch.onnx.export(built.module.eval(), sample, path, input_names=names_in,
                              output_names=built.outputs, opset_version=17, dynamo=False,
                              dynamic_axes={n: {0: "batch"} for n in names_in + built.outputs})
        return convert.ModelSource("onnx", path)
    raise ValueError(f"unknown hand-over form {form!r}: use one of {FORMS}")
