"""A zoo of mainstream architectures, as research teams hand them over.

Small widths, random weights (seeded), no downloads. Most come straight from
torch.nn, torchvision and HF transformers; the few classes defined in zoo_models.py
are the shapes those libraries leave to the user (a DLRM interaction, a text CNN, a
recommender bag of ids). Used by test_zoo.py and benchmarks/import_models.py.

Each entry says how the model is handed over (state_dict + module class,
TorchScript, or ONNX), its declared inputs and outputs, and its category.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, List, Optional

import torch
from torch import nn

# The zoo's own classes (zoo_models.py), re-exported: handovers name them "zoo:Class".
from zoo_models import (  # noqa: F401
    DLRM,
    BagOfIds,
    BatchLoop,
    BertClassifier,
    ConvPoolFlatten,
    PoolIndicesNet,
    RaggedBag,
    RecurrentText,
    SpeechEncoder,
    TextCNN,
    TextEncoder,
    TorchvisionNet,
    VideoNet,
    VisionTransformer,
)

from tfx_bridge.components.pytorch_model_importer import convert, signature
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
from tfx_bridge.components.pytorch_model_importer.report import check_table
from tfx_bridge.components.pytorch_model_importer.source import ModelSource


@dataclasses.dataclass(frozen=True)
class ZooModel:
    category: str
    build: Callable[[], nn.Module]
    inputs: List[str]
    outputs: List[str]
    handover: str  # "state_dict" | "torchscript" | "onnx"
    module_class: Optional[str] = None  # for state_dict handovers
    module_kwargs: Optional[dict] = None


def _seeded(module: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights and non-trivial BatchNorm statistics, in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / max(1, p.shape[-1]) ** 0.5))
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
    return module.eval()


# ----------------------------------------------------------------- builders


def _resnet():
    from torchvision.models.resnet import BasicBlock, ResNet

    return _seeded(ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10))


def _mobilenet():
    return _seeded(TorchvisionNet("mobilenet_v3_small"))


def _efficientnet():
    # torchvision's own EfficientNet class and block config, at half width and depth.
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    blocks, last_channel = _efficientnet_conf("efficientnet_b0", width_mult=0.5, depth_mult=0.5)
    return _seeded(EfficientNet(blocks, dropout=0.2, last_channel=last_channel,
                                num_classes=10))


def _module(cls, **kwargs):
    return lambda: _seeded(cls(**kwargs))


HERE = __name__  # importable as "zoo" once this folder is on sys.path

ZOO: Dict[str, ZooModel] = {
    "conv_pool_flatten": ZooModel(
        "CNN classifier (adaptive pool + flatten + linear)", _module(ConvPoolFlatten),
        ["image:float32:-1,3,16,16"], ["logits"], "state_dict", f"{HERE}:ConvPoolFlatten", {}),
    "resnet": ZooModel(
        "torchvision ResNet (BasicBlock)", _resnet, ["image:float32:-1,3,32,32"], ["logits"],
        "torchscript"),
    "mobilenet_v3": ZooModel(
        "torchvision MobileNetV3-Small", _mobilenet, ["image:float32:-1,3,32,32"], ["logits"],
        "torchscript", f"{HERE}:TorchvisionNet", {"name": "mobilenet_v3_small"}),
    "efficientnet": ZooModel(
        "torchvision EfficientNet (B0 blocks, half width/depth)", _efficientnet,
        ["image:float32:-1,3,32,32"], ["logits"], "onnx"),
    "transformer_encoder": ZooModel(
        "nn.TransformerEncoder (eval)", _module(TextEncoder),
        ["tokens:int64:-1,6:0..199"], ["logits"], "state_dict", f"{HERE}:TextEncoder", {}),
    "transformer_encoder_layer": ZooModel(
        "nn.TransformerEncoderLayer (eval)",
        _module(nn.TransformerEncoderLayer, d_model=32, nhead=4, dim_feedforward=64,
                batch_first=True),
        ["src:float32:-1,5,32"], ["encoded"], "state_dict", "torch.nn:TransformerEncoderLayer",
        {"d_model": 32, "nhead": 4, "dim_feedforward": 64, "batch_first": True}),
    "multihead_attention": ZooModel(
        "nn.MultiheadAttention with attention weights",
        _module(nn.MultiheadAttention, embed_dim=32, num_heads=4, batch_first=True),
        ["query:float32:-1,5,32", "key:float32:-1,7,32", "value:float32:-1,7,32"],
        ["attended", "weights"], "state_dict", "torch.nn:MultiheadAttention",
        {"embed_dim": 32, "num_heads": 4, "batch_first": True}),
    "embedding_bag": ZooModel(
        "nn.EmbeddingBag (fixed-width bags: mean with padding_idx, max, weighted sum)",
        _module(BagOfIds), ["history:int64:-1,8:0..499", "weights:float32:-1,8:0..1"],
        ["ctr"], "state_dict", f"{HERE}:BagOfIds", {}),
    "dlrm": ZooModel(
        "DLRM pairwise interaction (bmm + triu_indices)", _module(DLRM),
        ["dense:float32:-1,8", "sparse:int64:-1,3:0..99"], ["ctr"], "state_dict",
        f"{HERE}:DLRM", {}),
    "lstm_gru": ZooModel(
        "bidirectional LSTM + GRU text model", _module(RecurrentText),
        ["tokens:int64:-1,10:0..199"], ["logits"], "state_dict", f"{HERE}:RecurrentText", {}),
    "text_cnn": ZooModel(
        "1-D conv text CNN", _module(TextCNN), ["tokens:int64:-1,12:0..199"], ["logits"],
        "torchscript"),
    "bert": ZooModel(
        "HF transformers BertModel + attention mask", _module(BertClassifier),
        ["input_ids:int64:-1,8:0..299", "attention_mask:int64:-1,8:0..1"],
        ["hidden", "logits"], "state_dict", f"{HERE}:BertClassifier", {}),
    "vit": ZooModel(
        "HF transformers ViTModel (vision)", _module(VisionTransformer),
        ["pixel_values:float32:-1,3,32,32"], ["last_hidden_state"], "torchscript",
        f"{HERE}:VisionTransformer", {}),
    "wav2vec2": ZooModel(
        "HF transformers Wav2Vec2Model (audio waveform)", _module(SpeechEncoder),
        ["input_values:float32:-1,400:-1..1"], ["last_hidden_state"], "onnx",
        f"{HERE}:SpeechEncoder", {}),
    "video_r2plus1d": ZooModel(
        "torchvision VideoResNet, R(2+1)D blocks (video clips)", _module(VideoNet),
        ["clip:float32:-1,3,4,16,16"], ["logits"], "state_dict", f"{HERE}:VideoNet", {}),
}


# The test suite converts one model or more per category, within its time budget;
# benchmarks/import_models.py converts the whole zoo (MobileNetV3, EfficientNet and the
# bare TransformerEncoderLayer too) and, with --catalog, whole catalogs.
# Two test files share the work (test_zoo.py, test_zoo_attention.py), so two test
# workers convert half each.
TESTED_A = ["conv_pool_flatten", "resnet", "dlrm", "embedding_bag", "text_cnn"]
TESTED_B = ["transformer_encoder", "multihead_attention", "bert", "lstm_gru"]
TESTED = TESTED_A + TESTED_B
ATOL = 1e-4


def assert_equivalent(result, name: str) -> None:
    """Blessed, and every output within ATOL (integers exact) at batch 1, 7 and 32 against
    torch (unless handed over as ONNX) and onnxruntime; max_abs_error is the largest."""
    checks = result.report["checks"]
    assert result.blessed, check_table(checks)
    refs = {"onnxruntime"} | ({"torch"} if ZOO[name].handover != "onnx" else set())
    for batch in (1, 7, 32):
        for output in ZOO[name].outputs:
            for ref in refs:
                c = next(c for c in checks
                         if (c["batch"], c["output"], c["reference"]) == (batch, output, ref))
                if c["dtype"].startswith(("int", "uint", "bool")):
                    assert c["mismatches"] == 0
                else:
                    assert c["max_abs"] <= ATOL, c
    assert result.report["max_abs_error"] == max(
        c["max_abs"] for c in checks if c["dtype"].startswith("float"))


def assert_signature_kept(result, name: str) -> None:
    """serving_default takes the declared names, dtypes and shapes; outputs are named."""
    import tensorflow as tf

    entry = ZOO[name]
    fn = tf.saved_model.load(result.serving_dir).signatures["serving_default"]
    got = {k: (v.dtype.name, tuple(v.shape.as_list()))
           for k, v in fn.structured_input_signature[1].items()}
    want = {s.name: (s.dtype, tuple(None if d < 0 else d for d in s.shape))
            for s in signature.parse_input_specs(entry.inputs)}
    assert got == want
    assert sorted(fn.structured_outputs) == sorted(entry.outputs)


def assert_rewrite_named(result, kind: str) -> None:
    report = result.report
    applied = {r["kind"]: r for r in report["rewrites"]}
    assert kind in applied and applied[kind]["nodes"], report["rewrites"]
    md = open(os.path.join(os.path.dirname(result.serving_dir), convert.REPORT_MD)).read()
    assert f"- {kind}: " in md


class LazyImports:
    """name -> ImportResult, each zoo model imported on first use (once per process)."""

    def __init__(self, tmp_path_factory):
        self._factory = tmp_path_factory
        self._done = {}

    def __getitem__(self, name: str):
        if name not in self._done:
            entry = ZOO[name]
            folder = str(self._factory.mktemp(name))
            config = ImporterConfig.of_source(hand_over(name, folder), entry.inputs,
                                              entry.outputs)
            self._done[name] = convert.import_model(config, os.path.join(folder, "model"))
        return self._done[name]


def hand_over(name: str, folder: str, form: str = "") -> ModelSource:
    """The model file the research team would give us, written to ``folder``: the zoo
    entry's own form, or ``form`` (state_dict, torchscript traced in eval + no_grad,
    onnx)."""
    entry = ZOO[name]
    model = entry.build().eval()
    specs = signature.parse_input_specs(entry.inputs)
    form = form or entry.handover
    if form == "state_dict":
        path = os.path.join(folder, f"{name}.pt")
        torch.save(model.state_dict(), path)
        return ModelSource("state_dict", path, entry.module_class, entry.module_kwargs)
    sample = tuple(torch.from_numpy(v) for v in signature.make_inputs(specs, 3).values())
    if form == "torchscript":
        path = os.path.join(folder, f"{name}.torchscript")
        with torch.no_grad():
            torch.jit.trace(model, sample).save(path)
        return ModelSource("torchscript", path)
    path = os.path.join(folder, f"{name}.onnx")
    torch.onnx.export(model, sample, path, input_names=[s.name for s in specs],
                      output_names=entry.outputs, opset_version=17, dynamo=False,
                      dynamic_axes={n: {0: "batch"} for n in [s.name for s in specs]
                                    + entry.outputs})
    return ModelSource("onnx", path)

