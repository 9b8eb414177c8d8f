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
from tfx_bridge.components.pytorch_model_importer.errors import (
    ImporterConfigError,
    ModelSourceError,
)
from tfx_bridge.torch import class_path

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "detector_models:TinyYolo"


# A batch of 3 images through a SavedModel's serving_default in a fresh process with
# oneDNN off (stock TF Serving's CPU kernels): each output's shape and dtype.
_SERVE_3 = (
    "import os, sys, json, numpy as np\n"
    "os.environ['TF_ENABLE_ONEDNN_OPTS'] = '0'\n"
    "import tensorflow as tf\n"
    "m = tf.saved_model.load(sys.argv[1])\n"
    "h, w = (int(v) for v in sys.argv[2].split(','))\n"
    "images = np.random.default_rng(0).integers(0, 256, (3, h, w, 3)).astype(np.uint8)\n"
    "out = m.signatures['serving_default'](images=tf.constant(images))\n"
    "raw = m.signatures['serving_torchvision'](image=tf.constant("
    "images[0].transpose(2, 0, 1).astype(np.float32) / 255))\n"
    "print(json.dumps({k: [list(v.shape), v.dtype.name] for k, v in out.items()}"
    " | {'raw': sorted(raw)}))\n")


def _served_shapes(saved_model_dir: str, size: str = "50,70") -> dict:
    proc = subprocess.run([sys.executable, "-c", _SERVE_3, saved_model_dir, size],
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture()
def tiny_detector(monkeypatch):
    import torch

    monkeypatch.syspath_prepend(HERE)
    from detector_models import TinyYolo

    torch.manual_seed(0)
    return TinyYolo().eval()


@pytest.fixture()
def tiny_state_dict(tiny_detector, tmp_path):
    import torch

    path = tmp_path / "yolo.pt"
    torch.save(tiny_detector.state_dict(), path)
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
    shapes = _served_shapes(result.serving_dir)
    assert shapes["detection_boxes"] == [[3, 6, 4], "float32"]
    assert shapes["detection_scores"] == [[3, 6], "float32"]
    assert shapes["detection_classes"] == [[3, 6], "float32"]
    assert shapes["num_detections"] == [[3], "float32"]
    assert shapes["raw"] == ["boxes", "labels", "scores"]


def _import_at_batch_3(state_dict: str, module_class: str, tmp_path):
    """The tiny detector's state_dict imported as ``module_class``, checked at batch 3."""
    config = ImporterConfig(source_path=state_dict, module_class=module_class,
                            task=detection.TASK_DETECTION)
    return convert.import_model(config, str(tmp_path / "out"), batch_sizes=(3,))


def test_import_detector_dict_scores_before_labels_outputs_named_by_key(tiny_state_dict,
                                                                        tmp_path):
    result = _import_at_batch_3(tiny_state_dict, "detector_models:TinyYoloScoresFirst",
                                tmp_path)
    assert result.blessed, result.report["summary"]
    assert result.report["detection"]["model_outputs"] == ["boxes", "scores", "labels"]


def test_import_detector_onnx_as_documented_optimized_pushed_answers_batch_of_3(
        tiny_detector, tmp_path):
    import torch
    from tensorflow_serving.apis import prediction_log_pb2

    from tfx_bridge.components.serving_pusher import base_layout, serving
    from tfx_bridge.components.serving_pusher.config import PusherConfig
    from tfx_bridge.components.trt_optimizer import optimize
    from tfx_bridge.components.trt_optimizer.config import OptimizerConfig

    # Exported as torchvision documents it: one [3, H, W] image in, dynamic counts.
    path = str(tmp_path / "yolo.onnx")
    names = ["boxes", "labels", "scores"]
    with torch.no_grad():
        torch.onnx.export(tiny_detector, ([torch.rand(3, 64, 80)],), path, opset_version=17,
                          input_names=["image"], output_names=names,
                          dynamic_axes={"image": {1: "height", 2: "width"},
                                        **{n: {0: "detections"} for n in names}})
    # A fixed image size keeps the tiny detector's per-cell boxes few (warmup and the
    # optimizer's timings use the declared size; open sizes are tested apart).
    config = ImporterConfig(source_kind="onnx", source_path=path, max_detections=6,
                            task=detection.TASK_DETECTION,
                            inputs=["images:uint8:-1,96,128,3"])
    out = str(tmp_path / "model")
    result = convert.import_model(config, out)
    assert result.blessed, result.report["summary"]
    assert {c["reference"] for c in result.report["checks"]} == {"onnxruntime"}
    assert result.report["detection"]["detections_per_image_from"] == "max_detections"
    # The optimizer's CPU rules on a detector: timed on VGA-sized images, not
    # placeholder sizes; what it keeps goes to the pusher as a pipeline passes it.
    optimized = optimize.optimize_local(out, str(tmp_path / "optimized"),
                                        OptimizerConfig(time_budget_s=5))
    assert optimized.blessed, optimized.report["decision"]
    assert optimized.report["representative_inputs"] == ["images:uint8:-1,96,128,3"]
    assert optimized.report["batches"] == [1, 4]
    base = str(tmp_path / "serving")
    pushed = serving.push_model(PusherConfig(base, "detector", warmup_records=3),
                                str(tmp_path / "optimized"))
    assert pushed.pushed and pushed.version == 1, pushed.summary()
    version_dir = os.path.join(base, "detector", "1")
    warmup = os.path.join(version_dir, base_layout.WARMUP_DIR, base_layout.WARMUP_FILE)
    import tensorflow as tf

    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy())
            for r in tf.data.TFRecordDataset(warmup)]
    assert len(logs) == 3 and set(logs[0].predict_log.request.inputs) == {"images"}
    image = logs[0].predict_log.request.inputs["images"]
    assert [d.size for d in image.tensor_shape.dim] == [1, 96, 128, 3]
    assert pushed.details["warmup"]["requests"] == 3  # replayed through the loaded model
    assert os.path.exists(os.path.join(base, base_layout.MODELS_CONFIG))
    assert os.path.exists(os.path.join(base, base_layout.BATCHING_FILE))
    shapes = _served_shapes(version_dir, "96,128")
    assert shapes["detection_boxes"] == [[3, 6, 4], "float32"]
    assert shapes["num_detections"] == [[3], "float32"]


def test_import_detector_torchscript_rebuilt_from_module_class_blessed(tiny_detector,
                                                                       tmp_path):
    import torch

    path = str(tmp_path / "yolo.torchscript")
    torch.jit.script(tiny_detector).save(path)
    config = ImporterConfig(source_kind="torchscript", source_path=path, module_class=MODULE,
                            task=detection.TASK_DETECTION)
    result = convert.import_model(config, str(tmp_path / "out"), batch_sizes=(3,))
    assert result.blessed, result.report["summary"]
    assert result.report["source"]["rebuilt_from_torchscript"] is True
    assert {c["reference"] for c in result.report["checks"]} == {"torch", "onnxruntime"}


def test_import_detector_scripted_differs_from_eager_named_not_blessed(tiny_detector,
                                                                       tmp_path):
    import torch
    from detector_models import TinyYoloScriptedOtherwise

    model = TinyYoloScriptedOtherwise()
    model.load_state_dict(tiny_detector.state_dict())
    path = str(tmp_path / "yolo.torchscript")
    torch.jit.script(model.eval()).save(path)
    config = ImporterConfig(source_kind="torchscript", source_path=path,
                            module_class="detector_models:TinyYoloScriptedOtherwise",
                            task=detection.TASK_DETECTION)
    result = convert.import_model(config, str(tmp_path / "out"), batch_sizes=(3,))
    assert not result.blessed
    by_ref = {c["reference"]: c["verdict"] for c in result.report["checks"]}
    assert by_ref == {"torch": detection_verify.SCRIPTED_DIFFERS, "onnxruntime": "equal"}
    assert "scripted model differs from the same weights run eagerly" in \
        result.report["summary"]


def test_import_detector_torchvision_rcnn_torchscript_resized_as_scripted_blessed(
        monkeypatch, tmp_path):
    """torchvision's scripted transform resizes 97x131 to 118x159 where the eager one
    gives 118x160 (min_size 128, max_size 160): the export computes the size as the
    scripted model handed over does, so the served model matches it."""
    import torch

    monkeypatch.syspath_prepend(HERE)
    from detector_models import TinyRCNN

    torch.manual_seed(0)
    path = str(tmp_path / "rcnn.torchscript")
    torch.jit.script(TinyRCNN().eval()).save(path)
    config = ImporterConfig(source_kind="torchscript", source_path=path,
                            module_class="detector_models:TinyRCNN",
                            task=detection.TASK_DETECTION)
    result = convert.import_model(config, str(tmp_path / "out"), batch_sizes=(1,))
    assert result.blessed, result.report["summary"]
    assert result.report["detection"]["resize_size_as"] == detection.RESIZE_SCRIPTED
    assert [c["size"] for c in result.report["checks"]] == ["97x131", "97x131"]


@pytest.mark.parametrize("reference", [detection.RESIZE_EAGER, detection.RESIZE_SCRIPTED])
def test_detection_resize_as_exported_size_equals_reference_transform(reference, tmp_path):
    import onnxruntime as ort
    import torch
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    transform = GeneralizedRCNNTransform(128, 160, [0.0] * 3, [1.0] * 3, size_divisible=1)

    class Resize(torch.nn.Module):
        def forward(self, images):
            return transform(images)[0].tensors[0]

    path = str(tmp_path / "resize.onnx")
    with detection.resize_as(reference):
        torch.onnx.export(Resize(), ([torch.rand(3, 120, 150)],), path, opset_version=17,
                          input_names=["image"], dynamic_axes={"image": {1: "h", 2: "w"}})
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ref = torch.jit.script(transform) if reference == detection.RESIZE_SCRIPTED else transform
    # Sizes where the scripted (float32 scale) and eager (float64) sizes differ, where
    # a float32 computation differs from the eager one, and odd sizes around them.
    for hw in [(97, 131), (481, 641), (333, 517), (120, 90), (111, 111), (37, 901)]:
        image = torch.rand(3, *hw)
        want = tuple(ref.resize(image, None)[0].shape[-2:])
        got = session.run(None, {"image": image.numpy()})[0].shape[-2:]
        assert tuple(got) == want, hw


def test_import_detector_export_differs_from_torch_named_not_blessed(tiny_state_dict,
                                                                     tmp_path):
    result = _import_at_batch_3(tiny_state_dict, "detector_models:TinyYoloTracedOtherwise",
                                tmp_path)
    assert not result.blessed
    by_ref = {c["reference"]: c["verdict"] for c in result.report["checks"]}
    assert by_ref == {"torch": detection_verify.EXPORT_DIFFERS, "onnxruntime": "equal"}
    assert "torch's own ONNX export differs from torch" in result.report["summary"]


def test_import_detector_torch_float32_off_float64_matches_float32_rounding_blessed(
        tiny_state_dict, tmp_path):
    result = _import_at_batch_3(tiny_state_dict, "detector_models:TinyYoloFloat32Flips",
                                tmp_path)
    assert result.blessed, result.report["summary"]
    torch_check = next(c for c in result.report["checks"] if c["reference"] == "torch")
    assert torch_check["verdict"] == detection_verify.FLOAT32_ROUNDING
    assert torch_check["served_vs_float64"] == "equal"
    assert "the served model matches the float64 run" in result.report["summary"]


def test_detection_float64_reference_agreeing_with_float32_keeps_failure():
    """The float64 run decides as torch's float32 one: the served model's difference
    stays a failure."""
    import torch

    class Fixed(torch.nn.Module):
        def forward(self, images):
            return [{"boxes": torch.tensor([[0., 0, 4, 4]], dtype=im.dtype),
                     "labels": torch.tensor([1]), "scores": torch.ones(1, dtype=im.dtype)}
                    for im in images]

    want = {"boxes": np.array([[0., 0, 4, 4]], np.float32), "labels": np.array([1]),
            "scores": np.ones(1, np.float32)}
    served = {**want, "boxes": np.array([[0., 0, 9, 9]])}
    check = {"verdict": "differs"}
    found = detection_verify._against_float64(
        check, detection_verify._Float64(Fixed()), np.zeros((1, 8, 8, 3), np.uint8), 0,
        want, served, 1e-3)
    assert found is check


def test_import_detector_torchscript_other_kwargs_refused_naming_setting(tiny_detector,
                                                                         tmp_path):
    import torch

    path = str(tmp_path / "yolo.torchscript")
    torch.jit.script(tiny_detector).save(path)
    config = ImporterConfig(source_kind="torchscript", source_path=path, module_class=MODULE,
                            module_kwargs={"per_image": 4}, task=detection.TASK_DETECTION)
    with pytest.raises(ModelSourceError, match=r"per_image: scripted 6, rebuilt 4.*"
                                               r"--module-kwargs"):
        convert.import_model(config, str(tmp_path / "out"))


def test_import_detector_scripted_graph_without_class_refused_naming_fix(tiny_detector,
                                                                         tmp_path):
    import torch

    path = str(tmp_path / "yolo.torchscript")
    torch.jit.script(tiny_detector).save(path)
    config = ImporterConfig(source_kind="torchscript", source_path=path,
                            task=detection.TASK_DETECTION)
    with pytest.raises(ModelSourceError, match=r"torch.jit.script.*--module-class"):
        convert.import_model(config, str(tmp_path / "out"))


def test_importer_config_torchscript_module_class_only_for_detection():
    with pytest.raises(ImporterConfigError, match="scripted detector is rebuilt from"):
        ImporterConfig(source_kind="torchscript", source_path="/m/m.pt", module_class=MODULE,
                       inputs=("x:float32:-1,4",), output_names=("y",))
    with pytest.raises(ImporterConfigError, match="not onnx"):
        ImporterConfig(source_kind="onnx", source_path="/m/m.onnx", module_class=MODULE,
                       task=detection.TASK_DETECTION)


def test_detection_representative_input_open_size_vga_fixed_kept():
    from tfx_bridge.artifacts.tensorspec import parse_input_spec as parse

    assert detection.representative_input(parse("images:uint8:-1,-1,-1,3")) == \
        "images:uint8:-1,480,640,3"
    assert detection.representative_input(parse("x:float32:-1,96,-1,3")) == \
        "x:float32:-1,96,640,3"


def test_detection_compare_keypoint_scores_within_their_own_magnitude():
    want = {"boxes": np.array([[0., 0, 40, 40]]), "labels": np.array([1]),
            "scores": np.array([.9], np.float32),
            "keypoints": np.array([[[10., 12], [20, 22]]]),
            "keypoints_scores": np.array([[50., 31]], np.float32)}
    close = {**want, "keypoints_scores": want["keypoints_scores"] + 0.02}
    assert detection_verify.compare(want, close)["verdict"] == "equal"
    far = {**want, "keypoints_scores": want["keypoints_scores"] + 0.2}
    assert detection_verify.compare(want, far)["verdict"] == "differs"
    moved = {**want, "keypoints": want["keypoints"] + [[[4., 0], [0, 0]]]}
    assert detection_verify.compare(want, moved)["verdict"] == "differs"


def test_detection_compare_mask_flips_at_threshold_rounding_only_pass():
    base = np.full((1, 1, 20, 20), 0.9, np.float32)
    base[0, 0, :10] = 0.5004  # near the threshold: float32 rounding may flip these
    want = {"boxes": np.array([[0., 0, 20, 20]]), "labels": np.array([1]),
            "scores": np.array([.9], np.float32), "masks": base}
    rounded = {**want, "masks": np.where(base < 0.6, np.float32(0.4999), base)}
    assert detection_verify.compare(want, rounded)["verdict"] == "equal"
    flipped = {**want, "masks": np.where(base > 0.6, np.float32(0.2), base)}
    assert detection_verify.compare(want, flipped)["verdict"] == "differs"


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

