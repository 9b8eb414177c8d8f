"""The ``detection`` family of ``import_models.py --catalog``: torchvision's detectors
and a YOLO-style head through the importer with ``task="detection"``.

Models: every builder of ``torchvision.models.detection`` the importer allows by
name (Faster R-CNN ResNet-50-FPN v1/v2 and MobileNetV3-Large-FPN/-320, RetinaNet
v1/v2, FCOS, SSD300-VGG16, SSDlite320-MobileNetV3, Mask R-CNN v1/v2, Keypoint
R-CNN), ``weights=None`` and ``weights_backbone=None``, a small
``min_size``/``max_size`` and a score threshold of 0 so random weights still give
boxes, and :class:`YoloStyleHead` (filtered with ``torchvision.ops.batched_nms``).
BatchNorm statistics are set from the activations each layer sees on random
images (:func:`calibrate`): a random backbone otherwise collapses its features
and every box scores the same, leaving the order to ties.

Hand-over forms, as users make them:

- ``state_dict``: the builder named as the module class, with its keyword
  arguments (``catalog:YoloStyleHead`` for the head);
- ``torchscript``: ``torch.jit.script(model)`` with the builder named (the
  importer rebuilds it from the file's weights: torch's exporter refuses the
  scripted graph);
- ``onnx``: ``torch.onnx.export(model, ([image],), ...)`` as torchvision
  documents it, with ``max_detections`` given (the file does not record it).

Each import is checked as the importer checks detectors (detection_verify.py):
batches of 1, 3 and 8 images at three sizes, per image against torch (not for
ONNX) and onnxruntime, in a fresh process with oneDNN off.
"""
from __future__ import annotations

import os
from typing import Dict, List

import torch
import torchvision
from catalog_base import Built
from torch import nn

PER_IMAGE = 20
DETECTORS = ("fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2",
             "fasterrcnn_mobilenet_v3_large_fpn", "fasterrcnn_mobilenet_v3_large_320_fpn",
             "retinanet_resnet50_fpn", "retinanet_resnet50_fpn_v2", "fcos_resnet50_fpn",
             "ssd300_vgg16", "ssdlite320_mobilenet_v3_large", "maskrcnn_resnet50_fpn",
             "maskrcnn_resnet50_fpn_v2", "keypointrcnn_resnet50_fpn", "yolo_style_head")
YOLO = "yolo_style_head"
CALIBRATION_SIZE = (120, 150)


class YoloStyleHead(nn.Module):
    """A single-stage detector in the YOLO style: a conv trunk, one prediction per cell
    (box, objectness, classes), decoded and filtered by ``torchvision.ops.batched_nms``;
    torchvision's detection interface (a list of ``[3, H, W]`` images in, one dict per
    image out)."""

    def __init__(self, classes: int = 7, stride: int = 8, per_image: int = PER_IMAGE):
        super().__init__()
        self.stride = stride
        self.detections_per_img = per_image
        self.trunk = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.SiLU(),
            nn.Conv2d(32, 32, 3, 2, 1), nn.SiLU())
        self.pred = nn.Conv2d(32, 5 + classes, 1)

    def forward(self, images: List[torch.Tensor]) -> List[Dict[str, torch.Tensor]]:
        out: List[Dict[str, torch.Tensor]] = []
        for image in images:
            p = self.pred(self.trunk(image[None]))[0]  # [5 + C, h, w]
            h, w = p.shape[-2], p.shape[-1]
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            p = p.flatten(1).T
            cx = (xs.flatten() + torch.sigmoid(p[:, 0])) * self.stride
            cy = (ys.flatten() + torch.sigmoid(p[:, 1])) * self.stride
            bw = torch.exp(p[:, 2].clamp(max=4)) * 16
            bh = torch.exp(p[:, 3].clamp(max=4)) * 16
            boxes = torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], 1)
            scores, labels = (torch.sigmoid(p[:, 4:5]) * torch.sigmoid(p[:, 5:])).max(1)
            keep = torchvision.ops.batched_nms(boxes, scores, labels, 0.5)
            keep = keep[:self.detections_per_img]
            out.append({"boxes": boxes[keep], "labels": labels[keep], "scores": scores[keep]})
        return out


def builder_kwargs(name: str) -> dict:
    """The builder's keyword arguments besides the weights (the importer passes
    ``weights=None, weights_backbone=None`` itself)."""
    if name.startswith(("retinanet", "fcos", "ssd")):
        kw = {"score_thresh": 0.0, "detections_per_img": PER_IMAGE}
    else:
        kw = {"box_score_thresh": 0.0, "box_detections_per_img": PER_IMAGE}
    if not name.startswith("ssd"):
        kw.update(min_size=128, max_size=160)
    return kw


def calibrate(model: nn.Module, images) -> None:
    """BatchNorm statistics from the activations each layer sees, in one pass: a
    pre-hook sets a layer's mean and variance from its input before it normalises."""
    kinds = (nn.BatchNorm2d, torchvision.ops.misc.FrozenBatchNorm2d)

    def pre(module, args):
        x = args[0]
        module.running_mean.copy_(x.mean(dim=(0, 2, 3)))
        module.running_var.copy_(x.var(dim=(0, 2, 3)) + 1e-5)

    hooks = [m.register_forward_pre_hook(pre) for m in model.modules() if isinstance(m, kinds)]
    with torch.no_grad():
        model(images)
    for h in hooks:
        h.remove()


def build(name: str) -> Built:
    """The seeded, calibrated detector ``name`` and how it is handed over."""
    torch.manual_seed(0)
    if name == YOLO:
        module, module_class, kwargs = YoloStyleHead().eval(), "catalog:YoloStyleHead", {}
    else:
        kwargs = builder_kwargs(name)
        module = torchvision.models.get_model_builder(name)(
            weights=None, weights_backbone=None, **kwargs).eval()
        module_class = f"torchvision.models.detection:{name}"
    calibrate(module, [torch.rand(3, *CALIBRATION_SIZE,
                                  generator=torch.Generator().manual_seed(i))
                       for i in range(4)])
    params = sum(p.numel() for p in module.parameters())
    return Built(module, [], [], module_class, kwargs, "3xHxW images", params)


def hand_over(built: Built, form: str, folder: str, name: str):
    """The file a user would hand over, written to ``folder``: a ModelSource."""
    from tfx_bridge.components.pytorch_model_importer.source import ModelSource

    if form == "state_dict":
        path = os.path.join(folder, f"{name}.pt")
        torch.save(built.module.state_dict(), path)
        return ModelSource("state_dict", path, built.module_class, built.module_kwargs)
    if form == "torchscript":
        path = os.path.join(folder, f"{name}.torchscript")
        torch.jit.script(built.module).save(path)
        return ModelSource("torchscript", path, built.module_class, built.module_kwargs)
    if form == "onnx":
        path = os.path.join(folder, f"{name}.onnx")
        export_onnx(built.module, path, CALIBRATION_SIZE)
        return ModelSource("onnx", path)
    raise ValueError(f"unknown hand-over form {form!r}")


def export_onnx(module: nn.Module, path: str, hw) -> None:
    """``torch.onnx.export(model, ([image],), ...)`` as torchvision documents it: one
    ``[3, H, W]`` image of size ``hw`` traced, height, width and counts dynamic, the
    outputs named by the dict's keys."""
    image = torch.rand(3, *hw, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        outputs = list(module([image])[0])
        torch.onnx.export(module, ([image],), path, opset_version=17,
                          input_names=["image"], output_names=outputs, dynamo=False,
                          dynamic_axes={"image": {1: "height", 2: "width"},
                                        **{k: {0: "detections"} for k in outputs}})


def import_row(built: Built, source, folder: str) -> dict:
    """The importer on ``source`` with task="detection": the catalog row's fields."""
    from tfx_bridge.components.pytorch_model_importer import convert, detection_verify
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig

    config = ImporterConfig.of_source(source, [], [], task="detection",
                                      max_detections=(PER_IMAGE if source.kind == "onnx"
                                                      else None))
    result = convert.import_model(config, os.path.join(folder, "model"))
    report = result.report
    checks = report["checks"]
    by_ref = {}
    for ref in ("torch", "onnxruntime"):
        mine = [c for c in checks if c["reference"] == ref]
        if mine:
            by_ref[ref] = {
                "passed": sum(c["verdict"] in detection_verify.PASSING for c in mine),
                "tie_order": sum(c["verdict"] == detection_verify.TIE_ORDER for c in mine),
                "pixel_boundary": sum(c["verdict"] == detection_verify.BOUNDARY for c in mine),
                "checks": len(mine)}
    bad = [c for c in checks if c["verdict"] not in detection_verify.PASSING]
    message = None
    if bad:
        c = bad[0]
        message = (f"{len(bad)} of {len(checks)} image checks failed; first: {c['reference']} "
                   f"batch {c['batch']} image {c['image']} ({c['size']}): {c['verdict']}"
                   + (f" ({c['error']})" if c.get("error") else "")
                   + (f", {c['got_count']} detections for {c['count']}"
                      if c.get("got_count") is not None else ""))
    return {"status": "verified" if result.blessed else "not_equivalent",
            "converter": report.get("converter"), "summary": report.get("summary"),
            "checks_by_reference": by_ref, "max_abs_error": report.get("max_abs_error"),
            "detections_per_image": report["detection"]["detections_per_image"],
            "outputs": report["detection"]["model_outputs"],
            "rebuilt_from_torchscript": report["source"].get("rebuilt_from_torchscript"),
            "seconds": report.get("seconds"), "message": message}
