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
    its graph's first ``Resize``, read by onnxruntime from a copy of the graph that
    also outputs it. The session is built on first use, and only where a check needs
    it; ``ratio`` is None where the graph has no such ``Resize`` or it does not run."""

    def __init__(self, onnx_path: str):
        self.onnx_path = onnx_path
        self.session, self.output, self.tried = None, None, False

    def _load(self) -> None:
        import onnx
        import onnxruntime as ort

        self.tried = True
        model = onnx.load(self.onnx_path)
        first = next((n for n in model.graph.node if n.op_type == "Resize"), None)
        if first is None or len(model.graph.input) != 1:
            return
        self.output = first.output[0]
        if self.output not in {o.name for o in model.graph.output}:
            model.graph.output.append(onnx.ValueInfoProto(name=self.output))
        self.session = ort.InferenceSession(model.SerializeToString(),
                                            providers=["CPUExecutionProvider"])

    def ratio(self, image: np.ndarray) -> Optional[Tuple[float, float]]:
        """(height, width) of ``image`` ([H, W, 3], 0-255) resized, over its own."""
        try:
            if not self.tried:
                self._load()
            if self.session is None:
                return None
            chw = np.ascontiguousarray(image.transpose(2, 0, 1)).astype(np.float32) / 255.0
            name = self.session.get_inputs()[0].name
            resized = self.session.run([self.output], {name: chw})[0]
        except Exception:  # noqa: BLE001  (no resized frame: keypoints get no boundary verdict)
            self.session = None
            return None
        # torchvision's transform resizes one [1, 3, H, W] image (or [3, H, W]).
        if resized.ndim not in (3, 4) or resized.shape[-3] != 3:
            return None
        return resized.shape[-2] / image.shape[0], resized.shape[-1] / image.shape[1]
