"""The models of the served-latency benchmark (serving_latency.py): each a torch module
with random weights, its input specs (``name:dtype:shape[:lo..hi]``, batch -1), its
output names and the two batch sizes it is timed at.

Built from code only (torchvision ``weights=None``, transformers from a config), so
nothing is downloaded. ``build(name)`` is deterministic: the torch-eager child rebuilds
the module the ONNX was exported from and loads the saved ``state_dict``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Tuple

import torch
from catalog_base import fill_zero_weights
from torch import nn

SEQ = 128
IMAGE = "float32:-1,3,224,224"


@dataclasses.dataclass(frozen=True)
class BenchModel:
    about: str
    build: Callable[[], nn.Module]
    inputs: List[str]
    outputs: List[str]
    batches: Tuple[int, int] = (1, 32)
    # "detection": torchvision's detection interface, imported with task="detection"
    # (the served signature is the TF Object Detection API's, onnxruntime runs the
    # ONNX image by image); ``detections`` is K, the padded count per image.
    task: str = "tensors"
    detections: int = 0


class Logits(nn.Module):
    """A torchvision classifier with one named output."""

    def __init__(self, name: str):
        super().__init__()
        import torchvision

        self.net = getattr(torchvision.models, name)(weights=None)

    def forward(self, x):
        return self.net(x)


class Encoder(nn.Module):
    """A transformers encoder built from its config: the last hidden state."""

    def __init__(self, kind: str, **config):
        super().__init__()
        import transformers

        if kind == "bert":
            self.net = transformers.BertModel(transformers.BertConfig(**config),
                                              add_pooling_layer=False)
        else:
            self.net = transformers.DistilBertModel(transformers.DistilBertConfig(**config))

    def forward(self, input_ids, attention_mask):
        return self.net(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _mlp(sizes: List[int], last_relu: bool) -> nn.Sequential:
    layers: List[nn.Module] = []
    for j, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if last_relu or j < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Ranker(nn.Module):
    """DLRM-shaped: one embedding table per sparse feature, a bottom MLP on the dense
    features, pairwise dot products of the vectors (upper triangle), a top MLP."""

    def __init__(self, tables: int = 8, rows: int = 50_000, dim: int = 32, dense: int = 13):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(tables))
        self.bottom = _mlp([dense, 256, 64, dim], last_relu=True)
        n = tables + 1
        self.register_buffer("pairs", torch.triu_indices(n, n, offset=1), persistent=False)
        self.top = _mlp([dim + n * (n - 1) // 2, 256, 64, 1], last_relu=False)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        vectors = torch.stack([x] + [t(sparse[:, j]) for j, t in enumerate(self.tables)], 1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))
        flat = dots[:, self.pairs[0], self.pairs[1]]
        return torch.sigmoid(self.top(torch.cat([x, flat], 1)))


class AudioCNN(nn.Module):
    """A 1-D CNN keyword spotter over one second of 16 kHz audio."""

    def __init__(self, classes: int = 12):
        super().__init__()
        chans = [1, 32, 64, 128, 128]
        layers: List[nn.Module] = []
        for j, (a, b) in enumerate(zip(chans[:-1], chans[1:], strict=True)):
            layers += [nn.Conv1d(a, b, 9 if j else 80, stride=4 if j == 0 else 1,
                                 padding=4 if j else 38),
                       nn.BatchNorm1d(b), nn.ReLU(), nn.MaxPool1d(4)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(chans[-1], classes)

    def forward(self, audio):
        return self.head(self.features(audio).mean(-1))


def _moe() -> nn.Module:
    from tfx_bridge.pipelines import demo_models

    return demo_models.build("moe")


def _moe_io():
    from tfx_bridge.pipelines import demo_models

    _, _, inputs, outputs = demo_models.REFERENCE_MODELS["moe"]
    return inputs, outputs


DETECTOR_HW = (480, 640)  # a VGA frame, the size the importer's warmup uses


def _detector() -> nn.Module:
    """torchvision's Faster R-CNN MobileNetV3-Large-320-FPN (its own min_size 320,
    max_size 640, 100 detections per image) with BatchNorm statistics calibrated on
    random frames, so random weights still rank boxes apart."""
    import catalog_detection
    import torchvision

    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None).eval()
    generator = torch.Generator().manual_seed(0)
    catalog_detection.calibrate(model, [torch.rand(3, *DETECTOR_HW, generator=generator)
                                        for _ in range(2)])
    return model


_TOKENS = [f"input_ids:int64:-1,{SEQ}:0..1000", f"attention_mask:int64:-1,{SEQ}:1..1"]

MODELS: Dict[str, BenchModel] = {
    "resnet50": BenchModel("torchvision ResNet-50, 224", lambda: Logits("resnet50"),
                           [f"x:{IMAGE}"], ["logits"]),
    "mobilenet_v3_large": BenchModel("torchvision MobileNetV3-Large, 224",
                                     lambda: Logits("mobilenet_v3_large"),
                                     [f"x:{IMAGE}"], ["logits"]),
    "efficientnet_b0": BenchModel("torchvision EfficientNet-B0, 224",
                                  lambda: Logits("efficientnet_b0"), [f"x:{IMAGE}"], ["logits"]),
    "resnext50_32x4d": BenchModel("torchvision ResNeXt-50 32x4d, 224",
                                  lambda: Logits("resnext50_32x4d"), [f"x:{IMAGE}"], ["logits"]),
    "regnet_y_400mf": BenchModel("torchvision RegNetY-400MF, 224",
                                 lambda: Logits("regnet_y_400mf"), [f"x:{IMAGE}"], ["logits"]),
    "shufflenet_v2_x1_0": BenchModel("torchvision ShuffleNetV2 x1.0, 224",
                                     lambda: Logits("shufflenet_v2_x1_0"), [f"x:{IMAGE}"],
                                     ["logits"]),
    "convnext_tiny": BenchModel("torchvision ConvNeXt-Tiny, 224",
                                lambda: Logits("convnext_tiny"), [f"x:{IMAGE}"], ["logits"]),
    "densenet121": BenchModel("torchvision DenseNet-121, 224",
                              lambda: Logits("densenet121"), [f"x:{IMAGE}"], ["logits"]),
    "vit_b_16": BenchModel("torchvision ViT-B/16, 224", lambda: Logits("vit_b_16"),
                           [f"x:{IMAGE}"], ["logits"]),
    "bert_base": BenchModel(f"BERT-base-shaped encoder (12 x 768), sequence {SEQ}",
                            lambda: Encoder("bert"), _TOKENS, ["hidden"]),
    "bert_small": BenchModel(f"BERT encoder, 4 layers x 256, sequence {SEQ}",
                             lambda: Encoder("bert", hidden_size=256, num_hidden_layers=4,
                                             num_attention_heads=4, intermediate_size=1024),
                             _TOKENS, ["hidden"]),
    "distilbert": BenchModel(f"DistilBERT (6 x 768), sequence {SEQ}",
                             lambda: Encoder("distilbert"), _TOKENS, ["hidden"]),
    "ranker": BenchModel("DLRM-shaped ranker: 8 tables x 50k x 32, MLPs, dot interaction",
                         Ranker, ["dense:float32:-1,13", "sparse:int64:-1,8:0..49999"],
                         ["ctr"], (1, 512)),
    "moe": BenchModel("the demo's top-k MoE (tfx_bridge.pipelines.demo_models)", _moe,
                      *_moe_io()),
    "audio_cnn": BenchModel("1-D audio CNN, 1 s of 16 kHz audio",
                            AudioCNN, ["audio:float32:-1,1,16000"], ["logits"]),
    "fasterrcnn_mobilenet_320": BenchModel(
        "torchvision Faster R-CNN MobileNetV3-Large-320-FPN, 480x640 frames",
        _detector, [f"images:uint8:-1,{DETECTOR_HW[0]},{DETECTOR_HW[1]},3"],
        ["detection_boxes", "detection_scores", "detection_classes", "num_detections"],
        (1, 4), task="detection", detections=100),
}


def trained_like(model: nn.Module, seed: int = 0) -> nn.Module:
    """Draws BatchNorm statistics and the biases torchvision initialises to zero at
    random (seeded), and the weight matrices it initialises to zero (ViT's head: the
    output would not depend on the input), in place.

    Untrained values (mean 0, var 1, scale 1, shift 0, zero biases) fold into all-zero
    convolution biases, which Grappler removes, so the Conv2D + BiasAdd pattern a
    trained model has would not be there to fuse, and timings would not be a trained
    model's.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.affine:
                for tensor, low, high in ((module.running_mean, -0.1, 0.1),
                                          (module.running_var, 0.5, 1.5),
                                          (module.weight, 0.5, 1.5),
                                          (module.bias, -0.1, 0.1)):
                    tensor.copy_(torch.rand(tensor.shape, generator=generator)
                                 * (high - low) + low)
            elif isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear)) and \
                    module.bias is not None:
                module.bias.copy_(torch.rand(module.bias.shape, generator=generator)
                                  * 0.2 - 0.1)
    fill_zero_weights(model, seed)
    return model


def build(name: str) -> nn.Module:
    """Model ``name`` with seeded random weights (``trained_like``), in eval mode."""
    torch.manual_seed(0)
    if MODELS[name].task == "detection":
        return MODELS[name].build().eval()  # calibrated by its builder
    return trained_like(MODELS[name].build().eval())
