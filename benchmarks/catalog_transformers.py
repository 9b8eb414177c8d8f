"""The ``transformers`` catalog family (see ``catalog.py``): every ``AutoModel``
architecture whose main input is ``input_ids``, from a tiny config (hidden 32,
2 layers, 2 heads, intermediate 37, vocabulary 99) as transformers' own tests
build them, wrapped by :class:`TransformersModel` (handed over as
``catalog:TransformersModel``: ``catalog`` re-exports it).
"""
from __future__ import annotations

import inspect
from typing import Dict, List, Optional

import torch
from catalog_base import SEED, SEQ_LEN, Built, Excluded, NotBuilt
from torch import nn

TINY_VOCAB = 99

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


def check_text_architecture(model_type: str) -> None:
    """Raises Excluded (or NotBuilt) unless AutoModel's class for ``model_type`` takes
    ``input_ids`` first and no image, audio or layout input; builds nothing."""
    cls = auto_class(model_type)
    main = _main_input(cls.forward)
    if main != "input_ids":
        raise Excluded(f"not a text model: {cls.__name__}.forward takes {main} first")
    other = [p for p in inspect.signature(cls.forward).parameters if p in _NON_TEXT_INPUTS]
    if other:
        raise Excluded(f"multimodal: {cls.__name__}.forward also takes {', '.join(other)}")


def auto_class(model_type: str):
    """``AutoModel``'s class for ``model_type`` (raises NotBuilt when it cannot load)."""
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
    return cls


def build_transformers(model_type: str) -> Built:
    check_text_architecture(model_type)
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
