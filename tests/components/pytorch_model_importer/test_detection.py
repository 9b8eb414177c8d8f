"""PyTorchModelImporter with task='detection': torchvision's detection interface in,
the TF Object Detection API's signature out, checked image by image."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfx_bridge.components.pytorch_model_importer import convert, detection, detection_verify
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError
from tfx_bridge.torch import class_path

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "detector_models:TinyYolo"


@pytest.fixture()
def tiny_state_dict(tmp_path, monkeypatch):
    import torch

    monkeypatch.syspath_prepend(HERE)
    from detector_models import TinyYolo

    torch.manual_seed(0)
    path = tmp_path / "yolo.pt"
    torch.save(TinyYolo().state_dict(), path)
    return str(path)


def test_import_detector_state_dict_od_api_signature_blessed(tiny_state_dict, tmp_path):
    config = ImporterConfig(source_path=tiny_state_dict, module_class=MODULE,
                            task=detection.TASK_DETECTION)
    result = convert.import_model(config, str(tmp_path / "out"))
    report = result.report
    assert result.blessed, report["summary"]
    assert report["detection"]["detections_per_image"] == 6
    assert {c["reference"] for c in report["checks"]} == {"torch", "onnxruntime"}
    assert sorted({c["batch"] for c in report["checks"]}) == [1, 3, 8]
    # A fresh process, oneDNN off: a batch of 3 images through serving_default.
    script = (
        "import os, sys, json, numpy as np\n"
        "os.environ['TF_ENABLE_ONEDNN_OPTS'] = '0'\n"
        "import tensorflow as tf\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "images = np.random.default_rng(0).integers(0, 256, (3, 50, 70, 3)).astype(np.uint8)\n"
        "out = m.signatures['serving_default'](images=tf.constant(images))\n"
        "raw = m.signatures['serving_torchvision'](image=tf.constant("
        "images[0].transpose(2, 0, 1).astype(np.float32) / 255))\n"
        "print(json.dumps({k: [list(v.shape), v.dtype.name] for k, v in out.items()}"
        " | {'raw': sorted(raw)}))\n")
    proc = subprocess.run([sys.executable, "-c", script, result.serving_dir],
                          capture_output=True, text=True, timeout=300, check=True)
    shapes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert shapes["detection_boxes"] == [[3, 6, 4], "float32"]
    assert shapes["detection_scores"] == [[3, 6], "float32"]
    assert shapes["detection_classes"] == [[3, 6], "float32"]
    assert shapes["num_detections"] == [[3], "float32"]
    assert shapes["raw"] == ["boxes", "labels", "scores"]


def test_detection_compare_swapped_tie_tie_order_verdict():
    want = {"boxes": np.array([[0., 0, 4, 4], [5, 5, 9, 9]]), "labels": np.array([1, 2]),
            "scores": np.array([.5, .5], np.float32)}
    got = {k: v[::-1].copy() for k, v in want.items()}
    check = detection_verify.compare(want, got)
    assert check["verdict"] == detection_verify.TIE_ORDER
    assert check["tied_rows"] == [0, 1]
    got["scores"] = np.array([.5, .3], np.float32)
    assert detection_verify.compare(want, got)["verdict"] == "differs"


def test_detection_compare_count_differs_named():
    want = {"boxes": np.zeros((2, 4)), "labels": np.array([1, 1]),
            "scores": np.array([.9, .8], np.float32)}
    got = {k: v[:1] for k, v in want.items()}
    assert detection_verify.compare(want, got) == {"count": 2, "errors": {},
                                                   "verdict": "count", "got_count": 1}


@pytest.mark.parametrize("settings, expected", [
    ({"inputs": ("images:uint8:-1,3,64,64",)}, "batch of RGB images"),
    ({"output_names": ("boxes",)}, "leave output_names empty"),
    ({"max_detections": 0}, "max_detections 0"),
    ({"task": "segmentation"}, "task 'segmentation'"),
])
def test_importer_config_detection_bad_settings_refused(settings, expected):
    with pytest.raises(ImporterConfigError, match=expected):
        ImporterConfig(source_kind="onnx", source_path="/m/d.onnx",
                       **{"task": detection.TASK_DETECTION, **settings})


def test_class_path_detection_builder_allowed_by_name_other_functions_refused():
    name = "torchvision.models.detection:fasterrcnn_mobilenet_v3_large_320_fpn"
    assert name in class_path.BUILDERS
    assert class_path.check_class_path(name)[1] == "fasterrcnn_mobilenet_v3_large_320_fpn"
    from tfx_bridge.torch import model as torch_model

    # The same function under another path is not on the list: refused as a function.
    with pytest.raises(torch_model.TorchModelError, match="function"):
        torch_model.import_module_class(
            "torchvision.models.detection.faster_rcnn:fasterrcnn_mobilenet_v3_large_320_fpn")


def test_detection_builder_weights_kwarg_refused():
    from tfx_bridge.torch import model as torch_model

    build = torch_model.import_module_class(
        "torchvision.models.detection:fasterrcnn_mobilenet_v3_large_320_fpn")
    with pytest.raises(TypeError, match="takes its weights from the state_dict"):
        build(weights="DEFAULT")
