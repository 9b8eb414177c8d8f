"""Whole model catalogs for the importer benchmark (``import_models.py --catalog``).

Four families, every model built offline with seeded random weights:

- ``torchvision``: every classification builder of ``torchvision.models``,
  every segmentation builder and every video builder (clips of
  :data:`VIDEO_FRAMES` frames), ``weights=None`` (and ``weights_backbone=None``),
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
- ``transformers_media``: the vision, audio and dual-encoder architectures
  the text family leaves out (``catalog_media.py``).
- ``detection``: torchvision's detectors and a YOLO-style head, imported with
  ``task="detection"`` (``catalog_detection.py``).
- ``torch_nn``: recommender and sequence nets written with torch.nn
  (EmbeddingBag, PReLU, einsum attention, scatter_add/index_add, cumsum,
  torch.where, ConvTranspose2d, GroupNorm + depthwise-separable convs,
  F.interpolate, DIN, SASRec, LSTM/GRU, a LLaMA-style block).

Each model is handed over as a state_dict + ``catalog:Class`` (with kwargs;
``benchmarks/`` must be on sys.path, as ``import_models.py`` puts it), a
TorchScript file (``torch.jit.trace`` in eval + no_grad) or an ONNX file
(``torch.onnx.export``, opset 17, dynamic batch), as a user would.

Where each part lives: this module holds the torchvision family and the
dispatcher every caller uses (:func:`names`, :func:`build`, :func:`precheck`,
:func:`hand_over`), and re-exports the rest under ``catalog``: the shared
types (``catalog_base.py``), the transformers family
(``catalog_transformers.py``) and the torch.nn nets (``catalog_torch_nn.py``),
so ``catalog:Class`` names every handed-over class.
"""
from __future__ import annotations

import os
from typing import Callable, List, Optional, Sequence

import catalog_detection
import torch
from catalog_base import SEED, SEQ_LEN, Built, Excluded, NotBuilt, Skipped  # noqa: F401
from catalog_detection import YoloStyleHead  # noqa: F401 (re-exported: catalog:Class)
from catalog_media import (  # noqa: F401 (re-exported: catalog:Class hand-overs)
    TransformersMediaModel,
    build_media,
    check_media_architecture,
    media_names,
)
from catalog_torch_nn import (  # noqa: F401 (re-exported: catalog:Class hand-overs)
    TORCH_NN,
    BagRecommender,
    CumsumSession,
    DINRecommender,
    EinsumAttention,
    InterpolateFPN,
    LlamaBlock,
    PReLUConvNet,
    RecurrentTagger,
    RMSNorm,
    SASRec,
    ScatterPool,
    SeparableGroupNormNet,
    TinyUNet,
    WhereGate,
    build_torch_nn,
)
from catalog_torch_nn_patterns import (  # noqa: F401 (re-exported: catalog:Class hand-overs)
    CrossAttentionWithWeights,
    EdgeListGCN,
    SpatialTransformer,
    StftFrontEnd,
    TinyTransformerDecoder,
)
from catalog_transformers import (  # noqa: F401 (re-exported)
    TINY_VOCAB,
    TransformersModel,
    build_transformers,
    check_text_architecture,
    tiny_config,
    transformers_names,
)
from torch import nn

FAMILIES = ("torchvision", "transformers", "transformers_media", "torch_nn", "detection")
FORMS = ("state_dict", "torchscript", "onnx")
SIZES = (32, 64, 96, 128, 160, 224, 299)
MAX_PARAMS = 100_000_000
# Frames of a video builder's clip. S3D does not run on it: its last pooling (2x7x7)
# needs 16 frames at 224x224, past the catalog's compute budget (a not_built row).
VIDEO_FRAMES = 8
# MViT's builders fix their input at 16 x 224 x 224 (position embeddings sized for it):
# about 70 GFLOPs a clip, past what verifying batches 1, 7 and 32 takes on 2 cores.
FIXED_LARGE_INPUT = ("mvit_v1_b", "mvit_v2_s")
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


# =================================================================== torchvision


def torchvision_names() -> List[str]:
    import torchvision

    names = [f"{n}" for n in torchvision.models.list_models(module=torchvision.models)]
    names += [f"{n}" for n in
              torchvision.models.list_models(module=torchvision.models.segmentation)]
    names += [f"{n}" for n in torchvision.models.list_models(module=torchvision.models.video)]
    return names


def _is_video(name: str) -> bool:
    import torchvision

    return name in torchvision.models.list_models(module=torchvision.models.video)


def _image_shape(name: str, size: int) -> tuple:
    """One input of ``name`` at ``size``: a clip of :data:`VIDEO_FRAMES` frames for the
    video builders, else an image."""
    if _is_video(name):
        return (3, VIDEO_FRAMES, size, size)
    return (3, size, size)


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


def runnable_sizes(module: nn.Module, sizes=SIZES, shape=lambda s: (3, s, s)) -> List[int]:
    """The sizes of ``sizes`` the architecture accepts, smallest first."""
    ok = []
    for size in sizes:
        try:
            with torch.no_grad():
                module(torch.zeros(1, *shape(size)))
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
    shape = _image_shape(name, size)
    calibrate_batchnorm(module, lambda: (torch.rand(16, *shape, generator=gen) * 2 - 1,))
    return module


def build_torchvision(name: str, size: Optional[int] = None) -> Built:
    """The seeded, calibrated model at ``size``, or at the size :data:`SIZE_RULE` picks."""
    params = count_params_meta(name)
    if params > MAX_PARAMS:
        raise Skipped(f"{params / 1e6:.0f}M parameters (over {MAX_PARAMS // 1_000_000}M)")
    if name in FIXED_LARGE_INPUT:
        raise Skipped("its builder fixes the input at 16x224x224 (about 70 GFLOPs a clip)")
    spec = lambda s: ["image:float32:-1," + ",".join(map(str, _image_shape(name, s)))]  # noqa: E731
    if size is None:
        torch.manual_seed(SEED)
        runs = runnable_sizes(TorchvisionModel(name).eval(),
                              shape=lambda s: _image_shape(name, s))
        size = runs[0]
        for s in (s for s in runs if s <= MAX_STABLE_SIZE):
            if float32_holds(_seeded_torchvision(name, s), spec(s)):
                size = s
                break
    module = _seeded_torchvision(name, size)
    out = "out" if module.segmentation else "logits"
    return Built(module, spec(size), [out], "catalog:TorchvisionModel",
                 {"name": name}, "x".join(map(str, _image_shape(name, size))), params)


# =================================================================== catalog


def names(family: str) -> List[str]:
    if family == "torchvision":
        return torchvision_names()
    if family == "transformers":
        return transformers_names()
    if family == "transformers_media":
        return media_names()
    if family == "torch_nn":
        return list(TORCH_NN)
    if family == "detection":
        return list(catalog_detection.DETECTORS)
    raise ValueError(f"unknown family {family!r}: use one of {FAMILIES}")


def build(family: str, name: str, size: Optional[int] = None) -> Built:
    """The seeded model (raises NotBuilt / Skipped)."""
    if family == "torchvision":
        return build_torchvision(name, size)
    if family == "transformers":
        return build_transformers(name)
    if family == "transformers_media":
        return build_media(name)
    if family == "detection":
        return catalog_detection.build(name)
    return build_torch_nn(name)


def precheck(family: str, name: str) -> None:
    """The cheap part of :func:`build`, for the runner's own process: raises Excluded,
    Skipped or NotBuilt for a model that would not be converted (no weights built)."""
    if family == "transformers":
        check_text_architecture(name)
    elif family == "transformers_media":
        check_media_architecture(name)
    elif family == "torchvision":
        params = count_params_meta(name)
        if params > MAX_PARAMS:
            raise Skipped(f"{params / 1e6:.0f}M parameters (over {MAX_PARAMS // 1_000_000}M)")
        if name in FIXED_LARGE_INPUT:
            raise Skipped("its builder fixes the input at 16x224x224 (about 70 GFLOPs a clip)")


def hand_over(built: Built, form: str, folder: str, name: str):
    """The file a user would hand over, written to ``folder``: a ModelSource."""
    from tfx_bridge.components.pytorch_model_importer import signature
    from tfx_bridge.components.pytorch_model_importer.source import ModelSource

    specs = signature.parse_input_specs(built.inputs)
    safe = name.replace("/", "_")
    if form == "state_dict":
        path = os.path.join(folder, f"{safe}.pt")
        torch.save(built.module.state_dict(), path)
        return ModelSource("state_dict", path, built.module_class, built.module_kwargs)
    sample = tuple(torch.from_numpy(v) for v in signature.make_inputs(specs, 3).values())
    if form == "torchscript":
        path = os.path.join(folder, f"{safe}.torchscript")
        with torch.no_grad():
            torch.jit.trace(built.module.eval(), sample, check_trace=False).save(path)
        return ModelSource("torchscript", path)
    if form == "onnx":
        path = os.path.join(folder, f"{safe}.onnx")
        names_in = [s.name for s in specs]
        with torch.no_grad():
            torch.onnx.export(built.module.eval(), sample, path, input_names=names_in,
                              output_names=built.outputs, opset_version=17, dynamo=False,
                              dynamic_axes={n: {0: "batch"} for n in names_in + built.outputs})
        return ModelSource("onnx", path)
    raise ValueError(f"unknown hand-over form {form!r}: use one of {FORMS}")
