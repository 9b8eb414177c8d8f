"""A tiny detector with torchvision's detection interface, for the detection tests: a
YOLO-style single-stage head (conv trunk, one prediction per cell) filtered by
``torchvision.ops.batched_nms``; a list of ``[3, H, W]`` images in, one dict per
image out (boxes in pixels, labels, scores). Scriptable (``torch.jit.script``), as
torchvision's detectors are."""
from typing import Dict, List

import torch
import torchvision
from torch import nn


class TinyYolo(nn.Module):
    def __init__(self, classes: int = 4, per_image: int = 6):
        super().__init__()
        self.per_image = per_image
        self.detections_per_img = per_image
        self.trunk = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.SiLU(),
                                   nn.Conv2d(8, 16, 3, 2, 1), nn.SiLU())
        self.pred = nn.Conv2d(16, 5 + classes, 1)

    def forward(self, images: List[torch.Tensor]) -> List[Dict[str, torch.Tensor]]:
        out: List[Dict[str, torch.Tensor]] = []
        for image in images:
            p = self.pred(self.trunk(image[None]))[0]
            h, w = p.shape[-2], p.shape[-1]
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            p = p.flatten(1).T
            cx = (xs.flatten() + torch.sigmoid(p[:, 0])) * self.stride()
            cy = (ys.flatten() + torch.sigmoid(p[:, 1])) * self.stride()
            bw = torch.exp(p[:, 2].clamp(max=3)) * 6
            bh = torch.exp(p[:, 3].clamp(max=3)) * 6
            boxes = torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], 1)
            scores, labels = (torch.sigmoid(p[:, 4:5]) * torch.sigmoid(p[:, 5:])).max(1)
            keep = self.nms(boxes, scores, labels)[:self.per_image]
            out.append({"boxes": boxes[keep], "labels": labels[keep] + 1,
                        "scores": scores[keep]})
        return out

    def nms(self, boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor
            ) -> torch.Tensor:
        return torchvision.ops.batched_nms(boxes, scores, labels + 1, 0.5)

    def stride(self) -> float:
        return 4.0


class TinyYoloOffsetNms(TinyYolo):
    """TinyYolo with per-class NMS written as one ``nms`` over boxes shifted apart by
    class: scripted, its graph exports (a scripted ``batched_nms`` keeps a data-dependent
    branch whose scalar type torch's ONNX exporter cannot infer)."""

    def nms(self, boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor
            ) -> torch.Tensor:
        shift = labels.to(boxes.dtype)[:, None] * (boxes.max() + 1)
        return torchvision.ops.nms(boxes + shift, scores, 0.5)


class TinyYoloScoresFirst(TinyYolo):
    """TinyYolo returning its dict as RetinaNet, FCOS and SSD do: boxes, scores, labels."""

    def forward(self, images: List[torch.Tensor]) -> List[Dict[str, torch.Tensor]]:
        return [{"boxes": d["boxes"], "scores": d["scores"], "labels": d["labels"]}
                for d in super().forward(images)]


class TinyYoloScriptedOtherwise(TinyYolo):
    """TinyYolo whose scripted form computes otherwise than its eager form, as
    torchvision's scripted resize rounds sizes otherwise than its eager one."""

    def stride(self) -> float:
        return 4.5 if torch.jit.is_scripting() else 4.0


class TinyYoloTracedOtherwise(TinyYolo):
    """TinyYolo whose traced form (what torch.onnx.export records) computes otherwise
    than its eager form, as torchvision's keypoint decoding does under tracing."""

    def stride(self) -> float:
        return 4.5 if torch.jit.is_tracing() else 4.0


class TinyYoloFloat32Flips(TinyYolo):
    """TinyYolo whose eager float32 run decides otherwise than the same weights in
    float64 and than its traced form, as a float32 rounding that takes a threshold the
    other way does (a RoiAlign sample against the feature map's edge)."""

    def stride(self) -> float:
        eager_float32 = (not torch.jit.is_tracing()
                         and self.pred.weight.dtype == torch.float32)
        return 4.5 if eager_float32 else 4.0


def _tiny_rcnn(classes: int, per_image: int, min_size: int, max_size: int) -> dict:
    """The R-CNN parts the tiny test detectors share: a one-layer backbone, one anchor
    level, RoiAlign and a two-layer box head."""
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 4, 1), nn.ReLU())
    backbone.out_channels = 8
    rcnn = torchvision.models.detection.faster_rcnn
    return dict(
        backbone=backbone, min_size=min_size, max_size=max_size,
        rpn_anchor_generator=rcnn.AnchorGenerator(((16, 32),), ((0.5, 1.0, 2.0),)),
        box_roi_pool=torchvision.ops.MultiScaleRoIAlign(["0"], 7, 2),
        box_head=rcnn.TwoMLPHead(8 * 7 * 7, 32),
        box_predictor=rcnn.FastRCNNPredictor(32, classes),
        rpn_pre_nms_top_n_test=60, rpn_post_nms_top_n_test=20, box_score_thresh=0.0,
        box_detections_per_img=per_image)


class TinyRCNN(torchvision.models.detection.FasterRCNN):
    """torchvision's Faster R-CNN (its GeneralizedRCNNTransform, RPN, RoiAlign and box
    head) on a one-layer backbone, small enough for a test."""

    def __init__(self, min_size: int = 128, max_size: int = 160):
        super().__init__(**_tiny_rcnn(3, 8, min_size, max_size))


class TinyKeypointRCNN(torchvision.models.detection.KeypointRCNN):
    """torchvision's Keypoint R-CNN (its transform, RPN, RoiAlign, box and keypoint
    heads and heatmap decoding) on a one-layer backbone, small enough for a test."""

    def __init__(self, min_size: int = 128, max_size: int = 160):
        keypoint = torchvision.models.detection.keypoint_rcnn
        super().__init__(
            **_tiny_rcnn(2, 6, min_size, max_size),
            keypoint_roi_pool=torchvision.ops.MultiScaleRoIAlign(["0"], 14, 2),
            keypoint_head=keypoint.KeypointRCNNHeads(8, (16,)),
            keypoint_predictor=keypoint.KeypointRCNNPredictor(16, 3))
