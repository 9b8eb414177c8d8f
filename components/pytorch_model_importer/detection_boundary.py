"""Where a detector's mask or keypoints differ only because its box sits on a pixel
boundary: torchvision turns a box into an integer size twice (a mask is pasted into
the box expanded by (28 + 2) / 28 and truncated to whole pixels; a keypoint heatmap
is decoded at the ceiling of the box's sides in the resized frame), so two float32
computations of a box on such a boundary size that output a pixel apart while the
box, score and label agree. detection_verify.py names such a check
``pixel-boundary``.

The resized frame comes from the module's own transform, or, for a detector handed
over as ONNX alone, from the graph's first ``Resize`` (torchvision's transform resizes
the image before anything else in the graph resamples it), run by onnxruntime.
No TFX imports.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

# torchvision's mask head: 28x28 masks, pasted into the box expanded by (28 + 2) / 28
# (roi_heads.paste_masks_in_image, padding 1).
MASK_SIDE = 28
# Outputs an integer size derived from the box decides; the box itself must agree.
BOUNDARY_OUTPUTS = {"masks": "mask", "keypoints": "heatmap", "keypoints_scores": "heatmap"}


def across_pixel_boundary(want, got, bad_by_output, off, resized) -> Optional[List[dict]]:
    """Per detection out of place, what sizes its mask or heatmap in either box, where
    every one is off only in such outputs and its two boxes size them differently;
    otherwise None."""
    rows = []
    for i in np.flatnonzero(off):
        outs = sorted(k for k, bad in bad_by_output.items() if bad[i])
        if not outs or any(k not in BOUNDARY_OUTPUTS for k in outs):
            return None
        for kind in sorted({BOUNDARY_OUTPUTS[k] for k in outs}):
            if kind == "mask":
                sizes = [paste_box(b[i]) for b in (want["boxes"], got["boxes"])]
            elif resized is None:
                return None
            else:
                sizes = [heatmap_size(b[i], resized) for b in (want["boxes"], got["boxes"])]
            if sizes[0] == sizes[1]:
                return None
            rows.append({"row": int(i), "outputs": outs, kind: sizes})
    return rows


def paste_box(box) -> List[int]:
    """The whole-pixel box torchvision pastes a detection's mask into, from its pixel
    box (x1, y1, x2, y2), in float32 as torchvision's ``expand_boxes`` computes it.

    >>> paste_box([10.0, 20.0, 38.0, 48.0])
    [9, 19, 39, 49]
    """
    b = np.asarray(box, np.float32)
    half = np.float32(0.5)
    scale = np.float32((MASK_SIDE + 2) / MASK_SIDE)
    w_half, h_half = (b[2] - b[0]) * half * scale, (b[3] - b[1]) * half * scale
    x_c, y_c = (b[2] + b[0]) * half, (b[3] + b[1]) * half
    corners = np.array([x_c - w_half, y_c - h_half, x_c + w_half, y_c + h_half], np.float32)
    return [int(v) for v in np.trunc(corners)]


def heatmap_size(box, resized: Tuple[float, float]) -> List[int]:
    """The (width, height) torchvision decodes a detection's keypoint heatmap at: the
    ceiling of its box's sides in the resized frame, at least 1.

    >>> heatmap_size([0.0, 0.0, 46.0, 20.0], (118 / 97, 1.0))
    [46, 25]
    """
    b = np.asarray(box, np.float64)
    width = max((b[2] - b[0]) * resized[1], 1.0)
    height = max((b[3] - b[1]) * resized[0], 1.0)
    return [int(np.ceil(width)), int(np.ceil(height))]


def resized_ratio(module, image: np.ndarray) -> Optional[Tuple[float, float]]:
    """The size torchvision's transform resizes ``image`` ([H, W, 3]) to, over its own
    (height, width); None for a module without one (or none given)."""
    transform = getattr(module, "transform", None)
    if transform is None:
        return None
    import torch

    chw = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))).float() / 255.0
    try:
        with torch.no_grad():
            h, w = transform([chw])[0].image_sizes[0]
    except Exception:  # noqa: BLE001  (no resized frame: keypoints get no boundary verdict)
        return None
    return int(h) / image.shape[0], int(w) / image.shape[1]


class OnnxFrame:
    """The resized frame of a detector handed over as ONNX alone: the output shape of
    the first ``Resize`` fed by its image, read by onnxruntime from a copy of the
    graph that also outputs it. The session is built on first use, and only where a
    check needs it. ``ratio`` is None where the graph has no such ``Resize``, it does
    not run, or its output is not the image scaled by one factor (torchvision's
    transform keeps the aspect ratio)."""

    def __init__(self, onnx_path: str):
        self.onnx_path = onnx_path
        self.session, self.output, self.tried = None, None, False

    def _load(self) -> None:
        import onnx
        import onnxruntime as ort

        self.tried = True
        model = onnx.load(self.onnx_path)
        graph = model.graph
        weights = {t.name for t in graph.initializer}
        inputs = [v.name for v in graph.input if v.name not in weights]
        if len(inputs) != 1:
            return
        # The image's first resize: the first Resize whose data descends from the input.
        reached = set(inputs)
        first = None
        for node in graph.node:  # ONNX lists nodes in topological order
            if not reached.intersection(node.input):
                continue
            if node.op_type == "Resize" and node.input and node.input[0] in reached:
                first = node
                break
            reached.update(node.output)
        if first is None:
            return
        self.output = first.output[0]
        if self.output not in {o.name for o in graph.output}:
            graph.output.append(onnx.ValueInfoProto(name=self.output))
        self.session = ort.InferenceSession(model.SerializeToString(),
                                            providers=["CPUExecutionProvider"])

    def ratio(self, image: np.ndarray) -> Optional[Tuple[float, float]]:
        """(height, width) of ``image`` ([H, W, 3], 0-255) resized, over its own."""
        try:
            if not self.tried:
                self._load()
        except Exception:  # noqa: BLE001  (no resized frame: keypoints get no boundary verdict)
            return None
        if self.session is None:
            return None
        chw = np.ascontiguousarray(image.transpose(2, 0, 1)).astype(np.float32) / 255.0
        try:
            name = self.session.get_inputs()[0].name
            resized = self.session.run([self.output], {name: chw})[0]
        except Exception:  # noqa: BLE001  (this image gets no boundary verdict)
            return None
        # torchvision's transform resizes one [1, 3, H, W] image (or [3, H, W]).
        if resized.ndim not in (3, 4) or resized.shape[-3] != 3:
            return None
        h, w = image.shape[:2]
        ratio = resized.shape[-2] / h, resized.shape[-1] / w
        # One scale factor, each side floored to whole pixels: within a pixel of each other.
        if abs(ratio[0] - ratio[1]) >= 1.0 / min(h, w):
            return None
        return ratio
