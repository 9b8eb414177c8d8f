"""Detectors: models with torchvision's detection interface (a list of ``[3, H, W]``
float images in ``[0, 1]`` in; one dict per image out: ``boxes`` (x1, y1, x2, y2 in
the input image's pixels), ``labels``, ``scores``, and ``masks`` or ``keypoints`` +
``keypoints_scores``), imported with the serving signature of the TF Object
Detection API. No TFX imports; torch and onnx are imported lazily.

The graph converted is the one torchvision documents for ONNX: one image in, the
dict's tensors out with a dynamic detection count, preprocessing
(``GeneralizedRCNNTransform``'s normalisation and resize) inside and boxes mapped
back to the input image. ``serving_default`` runs it on each image of a batch:

    images             [B, H, W, 3] uint8 (or float32 in [0, 255], as declared)
    detection_boxes    [B, K, 4] float32, ymin, xmin, ymax, xmax normalised to [0, 1]
    detection_scores   [B, K] float32
    detection_classes  [B, K] float32 (the model's labels; torchvision's 0 is background)
    num_detections     [B] float32
    detection_masks    [B, K, H, W] float32 mask probabilities (models with masks)
    detection_keypoints        [B, K, P, 2] float32, y, x normalised (keypoint models)
    detection_keypoint_scores  [B, K, P] float32

padded with zeros to ``K``, the model's detections per image. ``serving_torchvision``
keeps torchvision's own layout: ``image`` [3, H, W] float32 in [0, 1] in, the dict's
tensors (pixel boxes, int64 labels) out.
"""
from __future__ import annotations

import contextlib
import os
import warnings
from typing import List, Optional, Sequence, Tuple

from tfx_bridge.components.pytorch_model_importer.errors import (
    ImporterConfigError,
    ModelSourceError,
)
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec

TASK_TENSORS = "tensors"
TASK_DETECTION = "detection"
TASKS = (TASK_TENSORS, TASK_DETECTION)
RAW_SIGNATURE = "serving_torchvision"
RAW_INPUT = "image"
DEFAULT_INPUT = "images:uint8:-1,-1,-1,3"
INPUT_DTYPES = ("uint8", "float32")
MAX_DETECTIONS = 10000
# The image size warmup requests and the optimizer's timings use where the declared
# input leaves it open (a VGA frame): a detector's cost grows with the image.
REPRESENTATIVE_SIZE = (480, 640)
# torchvision's outputs, in the order they are exported, and the OD API's names.
TORCHVISION_OUTPUTS = ("boxes", "labels", "scores", "masks", "keypoints", "keypoints_scores")
BOXES, CLASSES, SCORES, NUM = ("detection_boxes", "detection_classes", "detection_scores",
                               "num_detections")
MASKS, KEYPOINTS, KEYPOINT_SCORES = ("detection_masks", "detection_keypoints",
                                     "detection_keypoint_scores")
# The size of the sample image the export traces with (torchvision resizes every
# image to its own min_size/max_size inside the graph, so any size exports the same).
EXPORT_HW = (120, 150)
# How the reference the export is checked against computes GeneralizedRCNNTransform's
# resized size: an eager module in float64 from a float64 scale, a scripted one in
# float64 from a float32 scale.
RESIZE_EAGER, RESIZE_SCRIPTED = "eager", "scripted"


def representative_input(spec: TensorSpec) -> str:
    """The image batch's spec with its open height and width set to
    REPRESENTATIVE_SIZE (the report's ``representative_inputs``)."""
    h, w = (d if d > 0 else r for d, r in zip(spec.shape[1:3], REPRESENTATIVE_SIZE,
                                                strict=True))
    return f"{spec.name}:{spec.dtype}:-1,{h},{w},3"


def check_input(spec: TensorSpec) -> TensorSpec:
    """The declared image batch: ``name:uint8|float32:-1,H,W,3`` (H, W: -1 or fixed)."""
    shape = tuple(spec.shape)
    if spec.dtype not in INPUT_DTYPES or len(shape) != 4 or shape[0] != -1 or shape[3] != 3 \
            or any(d == 0 or d < -1 for d in shape[1:3]):
        raise ImporterConfigError(
            f"A detector's input {spec.to_text()!r}: expected a batch of RGB images "
            f"name:uint8:-1,H,W,3 or name:float32:-1,H,W,3 (H and W fixed or -1), as the "
            f"TF Object Detection API takes them, e.g. {DEFAULT_INPUT}.")
    return spec


def served_outputs(raw: Sequence[str]) -> List[str]:
    """serving_default's outputs for a model whose torchvision dict has keys ``raw``."""
    names = [BOXES, SCORES, CLASSES, NUM]
    if "masks" in raw:
        names.append(MASKS)
    if "keypoints" in raw:
        names += [KEYPOINTS, KEYPOINT_SCORES]
    return names


def raw_output_names(found: Sequence[str], where: str) -> List[str]:
    """The dict's keys in the dict's own order, which is export order: torch.onnx.export
    names a dict's values positionally (RetinaNet, FCOS and SSD give boxes, scores,
    labels; the R-CNNs boxes, labels, scores). A dict without boxes, labels and scores,
    or with keys torchvision's detectors do not have, is refused."""
    found = list(found)
    missing = [k for k in ("boxes", "labels", "scores") if k not in found]
    extra = [k for k in found if k not in TORCHVISION_OUTPUTS]
    if missing or extra:
        raise ImporterConfigError(
            f"{where} returns {found}; a detector returns torchvision's dict per image: "
            f"boxes, labels, scores (+ masks, or keypoints and keypoints_scores). Missing "
            f"{missing}, not known {extra}. Import other models with task='tensors'.")
    return found


def detections_per_image(module, declared: Optional[int]) -> Tuple[int, str]:
    """K, the padded detection count, and where it came from: the model's own setting
    (torchvision's ``roi_heads.detections_per_img`` or ``detections_per_img``), else
    ``declared`` (max_detections)."""
    for path in ("roi_heads.detections_per_img", "detections_per_img"):
        obj = module
        for part in path.split("."):
            obj = getattr(obj, part, None) if obj is not None else None
        if isinstance(obj, int) and obj > 0:
            if declared is not None and declared != obj:
                raise ImporterConfigError(
                    f"max_detections {declared} differs from the model's own {path} = {obj}: "
                    "drop max_detections, or build the model with the count you want.")
            return obj, f"the model's {path}"
    if declared is None:
        raise ImporterConfigError(
            "The number of detections per image is not in this model (an ONNX file, or a "
            "module without torchvision's detections_per_img): set max_detections to the "
            "model's box_detections_per_img (torchvision's default is 100).")
    return declared, "max_detections"


@contextlib.contextmanager
def resize_as(reference: str):
    """While torch traces the export, GeneralizedRCNNTransform resizes an image to the
    size ``reference`` (RESIZE_EAGER or RESIZE_SCRIPTED) computes, as float64 ops in
    the graph.

    torchvision computes that size three ways: eagerly as floor(side * scale) in
    float64; scripted the same but from a scale rounded to float32; under tracing in
    float32 throughout. Traced as it is, the exported graph resizes some images one
    pixel differently from the model handed over (97x131 at min_size 128 and max_size
    160: 118x159 scripted, 118x160 eager), and every box, score and mask after it
    differs. A fixed_size transform (SSD) has no such arithmetic and is left as is."""
    import torch

    if reference not in (RESIZE_EAGER, RESIZE_SCRIPTED):
        raise ValueError(f"resize_as: {reference!r} is not {RESIZE_EAGER!r} or "
                         f"{RESIZE_SCRIPTED!r}")
    try:
        from torchvision.models.detection import transform as tv_transform
    except ImportError:  # a detector of its own, without torchvision's transform
        yield
        return
    original = tv_transform._resize_image_and_masks

    def resize(image, self_min_size, self_max_size, target=None, fixed_size=None):
        if fixed_size is not None or target is not None \
                or not torch._C._get_tracing_state():
            return original(image, self_min_size, self_max_size, target, fixed_size)
        hw = torch._shape_as_tensor(image)[-2:]
        if reference == RESIZE_SCRIPTED:
            # As torch.jit.script compiles `float / Tensor`: a float32 reciprocal times
            # the float.
            side = hw.to(torch.float32)
            scale = torch.min(side.min().reciprocal() * float(self_min_size),
                              side.max().reciprocal() * float(self_max_size))
        else:
            # Python's int / int: a float64 division, written as one division of
            # vectors (the export casts a 0-d operand of a division, or a float /
            # Tensor's reciprocal, down to float32).
            sides = torch.stack([hw.min(), hw.max()]).to(torch.float64)
            with warnings.catch_warnings():
                # The limits are the model's settings: constants in the graph, as
                # torch warns they will be.
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                limits = torch.tensor([float(self_min_size), float(self_max_size)],
                                      dtype=torch.float64)
            scale = (limits / sides).min()
        scale = scale.to(torch.float64)
        size = torch.floor(hw.to(torch.float64) * scale).to(torch.int64)
        resized = torch.nn.functional.interpolate(
            image[None], size=[size[0], size[1]], mode="bilinear", align_corners=False)
        return resized[0], target

    tv_transform._resize_image_and_masks = resize
    try:
        yield
    finally:
        tv_transform._resize_image_and_masks = original


def export_detector(module, path: str, opset: int,
                    trace_warnings: Optional[list] = None,
                    reference: str = RESIZE_EAGER) -> List[str]:
    """torch.onnx.export as torchvision documents it for detectors: ``([image],)`` with
    dynamic height, width and detection count, the resize computed as ``reference``
    computes it (``resize_as``). Returns the dict's keys (the graph's output names)."""
    import torch

    from tfx_bridge.components.pytorch_model_importer.source import lazy_onnx

    onnx = lazy_onnx()
    image = torch.rand(3, *EXPORT_HW, generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad():
            first = module([image])
    except Exception as e:
        raise ModelSourceError(
            f"The detector failed on one {EXPORT_HW[0]}x{EXPORT_HW[1]} image in "
            f"torchvision's form (a list of [3, H, W] tensors): {type(e).__name__}: {e}. "
            "A detector takes a list of images and returns one dict per image.") from e
    if isinstance(first, tuple) and len(first) == 2 and isinstance(first[1], list):
        first = first[1]  # a scripted torchvision detector returns (losses, detections)
    if not (isinstance(first, list) and first and isinstance(first[0], dict)):
        raise ImporterConfigError(
            f"The detector returned {type(first).__name__}, not torchvision's list of dicts "
            "per image. Import other models with task='tensors'.")
    names = raw_output_names(first[0].keys(), "The detector")
    try:
        # torchvision's detectors trace their input checks (asserts on shapes): the
        # warnings are kept in the report, not printed.
        with warnings.catch_warnings(record=True) as caught, resize_as(reference):
            warnings.simplefilter("always", torch.jit.TracerWarning)
            torch.onnx.export(module, ([image],), path, opset_version=opset,
                              input_names=[RAW_INPUT], output_names=names,
                              dynamic_axes={RAW_INPUT: {1: "height", 2: "width"},
                                            **{k: {0: "detections"} for k in names}})
        if trace_warnings is not None:
            trace_warnings.extend(sorted({
                f"{os.path.basename(w.filename)}:{w.lineno}: {str(w.message)[:120]}"
                for w in caught if issubclass(w.category, torch.jit.TracerWarning)}))
    except Exception as e:
        kind = ("a TorchScript graph (torch.jit.script) that torch's ONNX exporter cannot "
                "export; name the class or builder it was scripted from with "
                "--module-class (and its --module-kwargs): it is rebuilt from the file's "
                "weights for the export and checked against the scripted model"
                if isinstance(module, torch.jit.ScriptModule) else
                "torch's exporter refused the detector; export it yourself as torchvision "
                "documents it and hand over the ONNX file, or fix the line named")
        raise ModelSourceError(
            f"torch.onnx.export of the detector failed: {type(e).__name__}: "
            f"{str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}. Cause: "
            f"{kind}.") from e
    model = onnx.load(path)
    onnx.checker.check_model(model)
    return names


def onnx_io(path: str) -> Tuple[str, List[str]]:
    """An ONNX hand-over's image input and outputs, the outputs checked to be
    torchvision's dict keys (a graph exported as torchvision documents it names them
    so)."""
    from tfx_bridge.components.pytorch_model_importer.source import lazy_onnx

    model = lazy_onnx().load(path, load_external_data=False)
    inputs = [i.name for i in model.graph.input
              if i.name not in {t.name for t in model.graph.initializer}]
    if len(inputs) != 1:
        raise ImporterConfigError(
            f"{path}: a detector's ONNX graph takes one image [3, H, W]; this one takes "
            f"{inputs}. Export with torch.onnx.export(model, ([image],), ...).")
    names = [o.name for o in model.graph.output]
    return inputs[0], raw_output_names(names, f"{path}'s graph")


def verification_images(spec: TensorSpec, batch: int, seed: int,
                        size: Tuple[int, int]):
    """A batch of images of different content for the declared input: each a smooth
    random field plus noise (so the detector sees edges and regions, not only noise),
    in the declared dtype's range."""
    import numpy as np

    h = spec.shape[1] if spec.shape[1] > 0 else size[0]
    w = spec.shape[2] if spec.shape[2] > 0 else size[1]
    rng = np.random.default_rng([seed, batch, h, w])
    coarse = rng.random((batch, max(2, h // 16), max(2, w // 16), 3))
    ys = np.linspace(0, coarse.shape[1] - 1, h).round().astype(int)
    xs = np.linspace(0, coarse.shape[2] - 1, w).round().astype(int)
    field = coarse[:, ys][:, :, xs]
    images = np.clip(field * 0.8 + rng.random((batch, h, w, 3)) * 0.2, 0, 1) * 255
    return images.round().astype(spec.dtype)
