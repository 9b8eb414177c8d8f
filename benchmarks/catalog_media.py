"""The ``transformers_media`` catalog family (see ``catalog.py``): the transformers
architectures the text family leaves out, built from a tiny config as
transformers' own tests build them.

- vision models whose ``AutoModel`` takes ``pixel_values`` first (ViT, DeiT,
  BEiT, Swin, ConvNeXt, SegFormer, DPT, ...): images ``[batch, 3, 32, 32]``
  (video models: ``[batch, frames, 3, 32, 32]``);
- audio models taking ``input_values`` (Wav2Vec2, HuBERT, ...: a waveform
  ``[batch, 1600]``) or ``input_features`` (Whisper's encoder: a log-mel
  spectrogram ``[batch, mel bins, frames]``);
- dual encoders (CLIP, SigLIP, ...): each tower is a model of its own,
  ``<type>.vision`` and ``<type>.text``, as they are served.

Each returns its last hidden state (or its first output tensor). Sizes
shrink under each config's own names: scalars as the text family's, per-stage
lists (``depths``, ``hidden_sizes``, per-stage heads) to one block per stage
and small widths. Architectures that still do not build or run from such a
config are ``not_built`` rows with the reason; layout, time-series, graph
and trajectory models stay excluded (the text family's rows say so).
"""
from __future__ import annotations

import inspect
from typing import List, Optional, Tuple

import torch
from catalog_base import SEED, SEQ_LEN, Built, Excluded, NotBuilt
from catalog_transformers import _TINY, _TOKEN_ID_FIELDS, TINY_VOCAB, _first_line, auto_class
from torch import nn

IMAGE = 32
WAVE = 1600
MEDIA_INPUTS = ("pixel_values", "input_values", "input_features")
TOWERS = ("vision", "text")
# Per-stage lists: one block per stage, widths doubling from 16, 2 heads.
_STAGE_DEPTHS = ("depths", "num_layers_per_stage")
_STAGE_WIDTHS = ("hidden_sizes", "embed_dims", "dims", "neck_hidden_sizes")
_STAGE_HEADS = ("num_heads", "num_attention_heads", "heads")
# Scalars of vision and audio configs.
_MEDIA_TINY = {
    "image_size": IMAGE, "patch_size": 4, "num_channels": 3, "window_size": 4,
    "embed_dim": 16, "num_frames": 2, "tubelet_size": 2, "max_source_positions": 16,
    "num_mel_bins": 16, "conv_dim": (32, 32), "conv_kernel": (8, 8),
    "conv_stride": (8, 5), "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 2,
    "decoder_hidden_size": 16, "fusion_hidden_size": 16, "projection_dim": 16,
}
# Per architecture corrections.
_MEDIA_OVERRIDES = {
    "dpt": {"num_hidden_layers": 4, "backbone_out_indices": [0, 1, 2, 3],
            "neck_hidden_sizes": [16, 16, 16, 16], "patch_size": 8},
    "segformer": {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1],
                  "hidden_sizes": [16, 32], "num_attention_heads": [1, 2],
                  "patch_sizes": [7, 3], "strides": [4, 2], "mlp_ratios": [2, 2]},
    "convnext": {"num_stages": 2, "hidden_sizes": [16, 32], "depths": [1, 1]},
    "convnextv2": {"num_stages": 2, "hidden_sizes": [16, 32], "depths": [1, 1]},
    "swin": {"depths": [1, 1], "num_heads": [1, 2], "patch_size": 2},
    "swinv2": {"depths": [1, 1], "num_heads": [1, 2], "patch_size": 2},
    "donut-swin": {"depths": [1, 1], "num_heads": [1, 2], "patch_size": 2},
    "whisper": {"max_source_positions": 16, "max_target_positions": 16},
    # MAE's encoder as a feature extractor: every patch kept (see TransformersMediaModel).
    "vit_mae": {"mask_ratio": 0.0},
}


def _config_class(model_type: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]


def _params(forward) -> List[str]:
    return [p for p in inspect.signature(forward).parameters if p != "self"]


def _is_dual_encoder(model_type: str) -> bool:
    try:
        config = _config_class(model_type)()
    except Exception:  # noqa: BLE001 (a config that needs arguments)
        return False
    return (getattr(config, "vision_config", None) is not None
            and getattr(config, "text_config", None) is not None)


def media_kind(model_type: str) -> str:
    """``pixel_values``, ``input_values``, ``input_features`` or ``towers``; raises
    Excluded for text models and inputs this family does not build (layout boxes,
    time series, graphs)."""
    cls = auto_class(model_type)
    params = _params(cls.forward)
    main = params[0] if params else None
    if main in MEDIA_INPUTS:
        return main
    if "pixel_values" in params and _is_dual_encoder(model_type):
        return "towers"
    if main == "input_ids":
        raise Excluded("a text model: the transformers family builds it")
    raise Excluded(f"neither vision nor audio: {cls.__name__}.forward takes {main} first")


def media_names() -> List[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    out = []
    for model_type in sorted(MODEL_MAPPING_NAMES):
        try:
            kind = media_kind(model_type)
        except (Excluded, NotBuilt):
            continue
        out += [f"{model_type}.{t}" for t in TOWERS] if kind == "towers" else [model_type]
    return out


def _tiny_kwargs(config) -> dict:
    """Tiny sizes for one config (and its sub-configs), under the names it uses."""
    kwargs = {}
    for value, names in _TINY.values():
        for n in names:
            if isinstance(getattr(config, n, None), int) and not isinstance(
                    getattr(config, n), bool):
                kwargs[n] = value
    for n, value in _MEDIA_TINY.items():
        current = getattr(config, n, None)
        if current is not None and isinstance(current, (int, list, tuple)) and not (
                isinstance(current, (list, tuple)) != isinstance(value, tuple)):
            kwargs[n] = list(value) if isinstance(value, tuple) else value
    size = getattr(config, "image_size", None)
    if isinstance(size, (list, tuple)) and len(size) == 2:
        kwargs["image_size"] = [IMAGE, IMAGE]
    for n in _STAGE_DEPTHS:
        if isinstance(getattr(config, n, None), (list, tuple)):
            kwargs[n] = [1] * len(getattr(config, n))
    for n in _STAGE_WIDTHS:
        current = getattr(config, n, None)
        if isinstance(current, (list, tuple)) and current and isinstance(current[0], int):
            kwargs[n] = [16 * 2 ** i for i in range(len(current))]
    for n in _STAGE_HEADS:
        current = getattr(config, n, None)
        if isinstance(current, (list, tuple)) and current and isinstance(current[0], int):
            kwargs[n] = [min(2, h) for h in current]
    if "num_conv_pos_embeddings" in kwargs or "conv_dim" in kwargs:
        kwargs.update(conv_dim=[32, 32], conv_kernel=[8, 8], conv_stride=[8, 5])
    for n in ("text_config", "vision_config", "audio_config", "backbone_config"):
        sub = getattr(config, n, None)
        if sub is not None and hasattr(sub, "to_dict"):
            kwargs[n] = {**sub.to_dict(), **_tiny_kwargs(sub)}
    return kwargs


def tiny_media_config(model_type: str):
    from transformers import AutoConfig

    default = _config_class(model_type)()
    kwargs = _tiny_kwargs(default)
    kwargs.update(_MEDIA_OVERRIDES.get(model_type, {}))
    kwargs["use_cache"] = False
    config = AutoConfig.for_model(model_type, **kwargs)
    for sub in (config, getattr(config, "text_config", None)):
        if sub is not None:
            _token_ids_in_vocab(sub)
    if hasattr(config, "_attn_implementation"):
        config._attn_implementation = "eager"
    for sub in ("text_config", "vision_config"):
        if hasattr(getattr(config, sub, None), "_attn_implementation"):
            getattr(config, sub)._attn_implementation = "eager"
    return config


def _token_ids_in_vocab(config) -> None:
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int):
        return
    for field in _TOKEN_ID_FIELDS:
        value = getattr(config, field, None)
        if isinstance(value, int) and value >= vocab:
            setattr(config, field, 1 if field == "pad_token_id" else 2)


def _split(name: str) -> Tuple[str, Optional[str]]:
    model_type, _, tower = name.partition(".")
    return model_type, tower or None


class TransformersMediaModel(nn.Module):
    """``AutoModel.from_config(tiny_media_config(model_type))``: its encoder for an
    encoder-decoder, one tower of a dual encoder; returns the last hidden state."""

    def __init__(self, model_type: str, tower: Optional[str] = None):
        super().__init__()
        from transformers import AutoModel

        config = tiny_media_config(model_type)
        try:
            model = AutoModel.from_config(config, attn_implementation="eager")
        except (TypeError, ValueError):
            model = AutoModel.from_config(config)
        if tower:
            model = getattr(model, f"{tower}_model")
        elif getattr(config, "is_encoder_decoder", False) and hasattr(model, "get_encoder"):
            model = model.get_encoder()
        self.config = config
        self.model = model.eval()
        self.takes = _params(self.model.forward)
        # A masked autoencoder shuffles its patches by noise it draws on every call:
        # given as arange, the order is the patches' own and the output repeatable.
        patches = getattr(getattr(getattr(self.model, "embeddings", None), "patch_embeddings",
                                  None), "num_patches", None)
        self.register_buffer("noise", torch.arange(float(patches))[None]
                             if "noise" in self.takes and patches else None,
                             persistent=False)

    def forward(self, main, attention_mask=None):
        kwargs = {}
        if self.noise is not None:
            kwargs["noise"] = self.noise.expand(main.shape[0], -1)
        if "attention_mask" in self.takes and attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if "return_dict" in self.takes:
            kwargs["return_dict"] = True
        out = self.model(main, **kwargs)
        if getattr(out, "last_hidden_state", None) is not None:
            return out.last_hidden_state
        if isinstance(out, (tuple, list)):
            return out[0]
        return out[0] if hasattr(out, "__getitem__") else out


def _candidate_inputs(module: TransformersMediaModel, kind: str) -> List[List[str]]:
    """Input specs to try, most specific first (the first one the model runs is kept)."""
    config = module.config
    if kind == "input_ids":
        vocab = getattr(config, "vocab_size", TINY_VOCAB) or TINY_VOCAB
        hi = min(TINY_VOCAB, vocab) - 1
        return [[f"input_ids:int64:-1,{SEQ_LEN}:3..{hi}",
                 f"attention_mask:int64:-1,{SEQ_LEN}:1..1"]]
    if kind == "input_values":
        return [[f"input_values:float32:-1,{WAVE}:-1..1"],
                [f"input_values:float32:-1,1,{WAVE}:-1..1"]]
    if kind == "input_features":
        mel = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 80)
        frames = 2 * (getattr(config, "max_source_positions", None) or 16)
        return [[f"input_features:float32:-1,{mel},{frames}:-1..1"],
                [f"input_features:float32:-1,{frames},{mel}:-1..1"]]
    size = getattr(config, "image_size", IMAGE)
    size = size[0] if isinstance(size, (list, tuple)) else size
    channels = getattr(config, "num_channels", 3)
    frames = getattr(config, "num_frames", None)
    image = f"{channels},{size},{size}"
    specs = [[f"pixel_values:float32:-1,{image}:-1..1"]]
    if frames:
        specs.insert(0, [f"pixel_values:float32:-1,{frames},{image}:-1..1"])
    return specs


def build_media(name: str) -> Built:
    from tfx_bridge.components.pytorch_model_importer import signature

    model_type, tower = _split(name)
    kind = media_kind(model_type)
    if (kind == "towers") != bool(tower) or (tower and tower not in TOWERS):
        raise Excluded(f"{name}: name a tower of a dual encoder as <type>.vision or "
                       "<type>.text, anything else by its type")
    torch.manual_seed(SEED)
    try:
        module = TransformersMediaModel(model_type, tower).eval()
    except Exception as e:  # noqa: BLE001
        raise NotBuilt(f"{type(e).__name__}: {_first_line(e)}") from e
    main = module.takes[0] if module.takes else None
    if main not in MEDIA_INPUTS + ("input_ids",):
        raise NotBuilt(f"{type(module.model).__name__} takes {main} first")
    errors = []
    for specs in _candidate_inputs(module, main):
        parsed = signature.parse_input_specs(specs)
        args = [torch.from_numpy(v) for v in signature.make_inputs(parsed, 2).values()]
        try:
            with torch.no_grad():
                out = module(*args)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {_first_line(e)}")
            continue
        if not isinstance(out, torch.Tensor) or out.dim() < 2:
            raise NotBuilt(f"no hidden state tensor (got {type(out).__name__})")
        params = sum(p.numel() for p in module.parameters())
        shape = specs[0].split(":")[2].replace("-1,", "").replace(",", "x")
        return Built(module, specs, ["last_hidden_state"], "catalog:TransformersMediaModel",
                     {"model_type": model_type, "tower": tower},
                     f"seq {SEQ_LEN}" if main == "input_ids" else shape, params)
    raise NotBuilt(f"forward on a tiny config fails: {errors[0]}")


def check_media_architecture(name: str) -> None:
    """The cheap part of :func:`build_media` (no weights): raises Excluded or NotBuilt."""
    model_type, tower = _split(name)
    kind = media_kind(model_type)
    if (kind == "towers") != bool(tower):
        raise Excluded(f"{name}: name a tower of a dual encoder as <type>.vision or "
                       "<type>.text")

