"""Keypoint detectors handed over as ONNX alone: served with keypoints, blessed, and
checked in the resized frame the graph itself computes (detection_boundary.OnnxFrame).
"""
from __future__ import annotations

import os

import numpy as np

from tfx_bridge.components.pytorch_model_importer import (
    convert,
    detection,
    detection_boundary,
    detection_verify,
)
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig

HERE = os.path.dirname(os.path.abspath(__file__))


def test_import_detector_keypoint_onnx_frame_from_graph_blessed(monkeypatch, tmp_path):
    """A Keypoint R-CNN handed over as ONNX alone, exported as torchvision documents
    it: served with keypoints, blessed, and the resized frame its heatmaps are sized in
    (read from the graph's own resize) is the one torchvision's transform computes."""
    import torch

    monkeypatch.syspath_prepend(HERE)
    from detector_models import TinyKeypointRCNN

    torch.manual_seed(0)
    module = TinyKeypointRCNN().eval()
    path = str(tmp_path / "keypoints.onnx")
    image = torch.rand(3, 120, 150)
    with torch.no_grad():
        names = list(module([image])[0])
        torch.onnx.export(module, ([image],), path, opset_version=17, input_names=["image"],
                          output_names=names, dynamo=False,
                          dynamic_axes={"image": {1: "height", 2: "width"},
                                        **{k: {0: "detections"} for k in names}})
    frame = detection_boundary.OnnxFrame(path)
    for hw in detection_verify.IMAGE_SIZES:
        picture = np.random.default_rng(0).integers(0, 256, (*hw, 3)).astype(np.uint8)
        assert frame.ratio(picture) == detection_boundary.resized_ratio(module, picture)
    config = ImporterConfig(source_kind="onnx", source_path=path,
                            task=detection.TASK_DETECTION, max_detections=6)
    result = convert.import_model(config, str(tmp_path / "out"), batch_sizes=(1, 3))
    assert result.blessed, result.report["summary"]
    assert "keypoints" in result.report["detection"]["model_outputs"]
    assert {c["reference"] for c in result.report["checks"]} == {"onnxruntime"}
