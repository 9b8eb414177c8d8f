"""A detector's proof of equivalence: detections compared as detections.

The SavedModel's ``serving_default`` runs in a fresh process with oneDNN off
(``detection_child.py``) on batches of images of different content (batch sizes
1, 3 and 8 by default, one image size per batch size so the mapping back to the
input image is checked at several sizes). Per image, against torch (torch
sources: the module on the same images as a list) and onnxruntime (the exported
or handed-over ONNX, image by image):

- the number of detections and every label exactly;
- boxes (in the input image's pixels, mapped back from the normalised ones) and
  scores within ``atol`` of the larger of 1 and the largest box coordinate, in the
  reference's order; masks at torchvision's 0.5 pixel threshold (a pixel at the
  threshold's edge may flip: at most 0.1% of a mask's pixels); keypoints as boxes.

Where detections differ only inside a group whose scores are equal within float
rounding (two float32 computations of a tie may order it either way), the check
says ``tie-order`` with the rows involved: the same detections, ordered
differently, or, for a pair of tied boxes of one label overlapping by more than
``NMS_TIE_IOU``, the other one of the pair kept (non-maximum suppression keeps
one, and with equal scores which one is the sort's choice; ``detection_ties.py``).
It blesses, and the report and the CLI's summary say so.

Where every detection out of place is off only in its mask or keypoints, and its two
boxes (within tolerance) give the integer sizes torchvision derives from a box
differently (``detection_boundary.py``), the check says ``pixel-boundary`` with the
rows involved. It blesses and is said, as a tie is.

Where the served model misses torch but matches the same module run in float64, and
torch's float32 run itself disagrees with its float64 run on that image, the check
says ``float32-rounding``: torch's own float32 rounding took a discrete decision
(a score against a threshold, an NMS overlap, a RoiAlign sample against the feature
map's edge) the other way, and the served model follows the exact computation. It
blesses and is said. No TFX imports.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfx_bridge.components.pytorch_model_importer import (
    detection,
    detection_boundary,
    detection_ties,
)
from tfx_bridge.components.pytorch_model_importer.detection_ties import TIE_ATOL
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec
from tfx_bridge.components.pytorch_model_importer.verify import run_fresh
from tfx_bridge.errors import short_message

DEFAULT_BATCH_SIZES = (1, 3, 8)
# Image sizes for a dynamic height and width, one per batch size in turn: landscape,
# portrait and square, none a multiple of the backbone's stride.
IMAGE_SIZES = ((97, 131), (120, 90), (111, 111))
DEFAULT_ATOL = 1e-3
MASK_THRESHOLD = 0.5
MASK_FLIPS = 1e-3
CHILD_MODULE = "tfx_bridge.components.pytorch_model_importer.detection_child"
CHILD_MARKER = "TFX_BRIDGE_DETECT "
TIMEOUT_S = 1800
EQUAL, TIE_ORDER = "equal", "tie-order"
# A scripted detector that disagrees with its own eager rebuild on an image, where the
# served model matches the eager one (torchvision's scripted code paths differ: its
# scripted GeneralizedRCNNTransform rounds the resized size down in float32). Not a
# pass: the served model does not reproduce the file handed over on that image.
SCRIPTED_DIFFERS = "scripted-differs-from-eager"
# torch's own ONNX export disagrees with torch on an image, and the served model agrees
# with onnxruntime on that export. Not a pass either.
EXPORT_DIFFERS = "export-differs-from-torch"
# A detection whose box, within tolerance, lies across the pixel boundary that sizes its
# pasted mask or decoded heatmap in the two computations (see the module's docstring).
BOUNDARY = "pixel-boundary"
# torch's float32 run differs from its own float64 run on the image, and the served
# model matches the float64 run (see the module's docstring).
FLOAT32_ROUNDING = "float32-rounding"
PASSING = (EQUAL, TIE_ORDER, BOUNDARY, FLOAT32_ROUNDING)


def compare(want: Dict[str, np.ndarray], got: Dict[str, np.ndarray],
            atol: float = DEFAULT_ATOL, resized: Optional[Tuple[float, float]] = None
            ) -> dict:
    """One image's detections (torchvision's dict, pixel boxes) against the reference's.

    ``resized``: the model's resized image size over the input's, (height, width), where
    known: the frame in which keypoint heatmaps are sized.

    >>> w = {"boxes": np.array([[0., 0, 4, 4]]), "labels": np.array([3]),
    ...      "scores": np.array([.9], np.float32)}
    >>> compare(w, dict(w))["verdict"]
    'equal'
    >>> compare(w, {**w, "labels": np.array([2])})["verdict"]
    'differs'
    """
    check = {"count": int(len(want["scores"])), "errors": {}}
    if len(got["scores"]) != len(want["scores"]):
        return {**check, "verdict": "count", "got_count": int(len(got["scores"]))}
    scores = np.asarray(want["scores"])
    group = (np.concatenate([[0], np.cumsum(np.diff(scores) < -TIE_ATOL)]) if len(scores)
             else np.zeros(0, int))
    off = np.zeros(len(scores), bool)
    bad_by_output = {}
    scale = max(1.0, float(np.abs(want["boxes"]).max())) if len(want["boxes"]) else 1.0
    for key, w in want.items():
        g = np.asarray(got[key])
        w = np.asarray(w)
        if key == "masks":
            # A pixel within atol of the threshold may land on either side of it in two
            # float32 computations: only flips beyond that count.
            near = np.abs(w.astype(np.float64) - MASK_THRESHOLD) <= atol
            w, g = w > MASK_THRESHOLD, g > MASK_THRESHOLD
        if w.shape != g.shape:
            return {**check, "verdict": "shape", "output": key,
                    "shapes": [list(w.shape), list(g.shape)]}
        if not len(w):
            check["errors"][key] = 0.0
            continue
        if key == "masks":
            flips = ((w != g) & ~near).reshape(len(w), -1).mean(1)
            check["errors"][key] = float(flips.max())
            bad = flips > MASK_FLIPS
        elif w.dtype.kind in "iub":
            bad = (w != g).reshape(len(w), -1).any(1)
            check["errors"][key] = float(bad.mean())
        else:
            diff = np.abs(w.astype(np.float64) - g).reshape(len(w), -1).max(1)
            check["errors"][key] = float(diff.max())
            # Scores are probabilities: atol itself. Keypoint scores are heatmap logits,
            # unbounded: atol of their own magnitude. Boxes and keypoints: atol of the
            # largest box coordinate.
            own = max(1.0, float(np.abs(w).max()))
            bad = diff > atol * {"scores": 1.0, "keypoints_scores": own}.get(key, scale)
        bad_by_output[key] = bad
        off |= bad
    if not off.any():
        return {**check, "verdict": EQUAL}
    if detection_ties.explained(want, got, group, off, atol * scale):
        return {**check, "verdict": TIE_ORDER, "tied_rows": [int(i) for i in np.flatnonzero(off)]}
    straddled = detection_boundary.across_pixel_boundary(want, got, bad_by_output, off,
                                                         resized)
    if straddled:
        return {**check, "verdict": BOUNDARY, "boundary_rows": straddled}
    return {**check, "verdict": "differs", "rows_off": [int(i) for i in np.flatnonzero(off)][:20]}


def unpadded(served: Dict[str, np.ndarray], index: int, hw: Tuple[int, int],
             raw_names: Sequence[str]) -> Dict[str, np.ndarray]:
    """serving_default's padded, normalised outputs for image ``index`` back in
    torchvision's form (pixel x1, y1, x2, y2 boxes, int labels), for comparison."""
    n = int(round(float(served[detection.NUM][index])))
    h, w = hw
    boxes = served[detection.BOXES][index, :n].astype(np.float64)
    out = {"boxes": np.stack([boxes[:, 1] * w, boxes[:, 0] * h, boxes[:, 3] * w,
                              boxes[:, 2] * h], 1),
           "labels": served[detection.CLASSES][index, :n].round().astype(np.int64),
           "scores": served[detection.SCORES][index, :n]}
    if "masks" in raw_names:
        out["masks"] = served[detection.MASKS][index, :n][:, None]
    if "keypoints" in raw_names:
        yx = served[detection.KEYPOINTS][index, :n].astype(np.float64)
        out["keypoints"] = np.stack([yx[..., 1] * w, yx[..., 0] * h], -1)
        out["keypoints_scores"] = served[detection.KEYPOINT_SCORES][index, :n]
    return out


def reference_form(ref: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """A reference dict as the served one is compared: keypoints as (x, y) only
    (torchvision's third column is its visibility flag, always 1)."""
    out = dict(ref)
    if "keypoints" in out:
        out["keypoints"] = np.asarray(out["keypoints"])[..., :2]
    return out


def batches(spec: TensorSpec, batch_sizes: Sequence[int]) -> List[np.ndarray]:
    return [detection.verification_images(spec, b, seed=i, size=IMAGE_SIZES[i % len(IMAGE_SIZES)])
            for i, b in enumerate(batch_sizes)]


def run_torch(module, images: np.ndarray, dtype: str = "float32"
              ) -> List[Dict[str, np.ndarray]]:
    """The module on one batch's images as torchvision takes them (a list of
    ``[3, H, W]`` floats in [0, 1], of ``dtype``)."""
    import torch

    chw = [torch.from_numpy(np.ascontiguousarray(im.transpose(2, 0, 1))).to(
        getattr(torch, dtype)) / 255.0 for im in images]
    with torch.no_grad():
        out = module(chw)
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], list):
        out = out[1]  # a scripted detector returns (losses, detections)
    return [{k: v.numpy() for k, v in d.items()} for d in out]


def run_ort(onnx_path: str, images: np.ndarray, raw_names: Sequence[str], session=None
            ) -> List[Dict[str, np.ndarray]]:
    import onnxruntime as ort

    session = session or ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    found = []
    for im in images:
        chw = np.ascontiguousarray(im.transpose(2, 0, 1)).astype(np.float32) / np.float32(255.0)
        found.append(dict(zip(raw_names, session.run(list(raw_names), {name: chw}), strict=True)))
    return found


def serve_fresh(saved_model_dir: str, spec: TensorSpec, images: Sequence[np.ndarray],
                outputs: Sequence[str]) -> List[object]:
    """serving_default on each batch in a fresh process (``verify.run_fresh``): per batch,
    the outputs by name, or the error's text."""
    answer = run_fresh(CHILD_MODULE, CHILD_MARKER, saved_model_dir,
                       {str(i): b for i, b in enumerate(images)},
                       {"input": spec.name, "outputs": list(outputs), "batches": len(images)},
                       timeout=TIMEOUT_S)
    if isinstance(answer, str):
        return [answer] * len(images)
    payload, arrays = answer
    return [payload["errors"].get(str(i)) or {n: arrays[f"{i}::{n}"] for n in outputs}
            for i in range(len(images))]


def verify(saved_model_dir: str, onnx_path: str, spec: TensorSpec, raw_names: Sequence[str],
           module=None, atol: float = DEFAULT_ATOL,
           batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES, eager=None) -> List[dict]:
    """One check per image and reference: ``{"batch", "image", "size", "reference",
    "verdict", "count", "errors", ...}``; ``verdict`` in PASSING blesses.

    ``eager`` is the eager module a scripted ``module`` was rebuilt as for the export:
    where the served model misses the scripted reference on an image, the eager one
    is run too, and an image on which the scripted and eager models disagree while the
    served one matches the eager is named (SCRIPTED_DIFFERS), not left as "differs"."""
    import onnxruntime as ort

    outputs = detection.served_outputs(raw_names)
    images = batches(spec, batch_sizes)
    served = serve_fresh(saved_model_dir, spec, images, outputs)
    session = None
    try:
        session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001  (recorded: the reference could not load)
        ort_error: Optional[str] = short_message(e)
    else:
        ort_error = None
    checks = []
    in_float64 = _Float64(module)
    # Without a module, the resized frame is the ONNX graph's own.
    onnx_frame = (detection_boundary.OnnxFrame(onnx_path)
                  if module is None and "keypoints" in raw_names else None)
    for batch, got in zip(images, served, strict=True):
        hw = (int(batch.shape[1]), int(batch.shape[2]))
        refs = {}
        if module is not None:
            refs["torch"] = _guarded(lambda b=batch: run_torch(module, b))
        refs["onnxruntime"] = (ort_error if ort_error is not None else
                               _guarded(lambda b=batch: run_ort(onnx_path, b, raw_names,
                                                                session)))
        # Only keypoint heatmaps are sized in the resized frame.
        resized = [detection_boundary.resized_ratio(module, im)
                   if "keypoints" in raw_names else None for im in batch]
        found: Dict[str, List[dict]] = {}
        for reference, want in refs.items():
            found[reference] = []
            for i in range(len(batch)):
                row = {"batch": len(batch), "image": i, "size": f"{hw[0]}x{hw[1]}",
                       "reference": reference}
                if isinstance(got, str) or isinstance(want, str):
                    side = "served" if isinstance(got, str) else reference
                    found[reference].append({
                        **row, "verdict": "error", "count": None, "errors": {},
                        "error": f"{side}: {got if isinstance(got, str) else want}"})
                    continue
                mine = unpadded(got, i, hw, raw_names)
                check = {**row, **compare(reference_form(want[i]), mine, atol, resized[i])}
                if onnx_frame is not None and check["verdict"] == "differs":
                    # An ONNX hand-over's frame costs a run of its own: only on need.
                    resized[i] = onnx_frame.ratio(batch[i])
                    if resized[i] is not None:
                        check = {**row, **compare(reference_form(want[i]), mine, atol,
                                                  resized[i])}
                if (eager is not None and reference == "torch"
                        and check["verdict"] not in PASSING):
                    check = _against_eager(check, eager, batch, i, want[i], mine, atol,
                                           resized[i])
                if reference == "torch" and check["verdict"] not in PASSING:
                    check = _against_float64(check, in_float64, batch, i, want[i], mine,
                                             atol, resized[i])
                found[reference].append(check)
        if "torch" in found:
            found["torch"] = [_against_export(c, found["onnxruntime"][i], refs, i, atol,
                                              resized[i])
                              for i, c in enumerate(found["torch"])]
        for reference_checks in found.values():
            checks.extend(reference_checks)
    return checks


def _against_export(check: dict, ort_check: dict, refs: dict, i: int, atol: float,
                    resized=None) -> dict:
    """A failed check against torch named EXPORT_DIFFERS where the served model matches
    onnxruntime on torch's own ONNX export and that export disagrees with torch: the
    difference is the export's (torchvision traces other code paths, e.g. its keypoint
    decoding), not the conversion's."""
    if check["verdict"] in PASSING or check["verdict"] in ("error", SCRIPTED_DIFFERS) \
            or ort_check["verdict"] not in PASSING:
        return check
    torch_vs_ort = compare(reference_form(refs["torch"][i]),
                           reference_form(refs["onnxruntime"][i]), atol, resized)["verdict"]
    if torch_vs_ort in PASSING:
        return check
    return {**check, "verdict": EXPORT_DIFFERS, "torch_verdict": check["verdict"]}


def _against_eager(check: dict, eager, batch: np.ndarray, i: int, scripted: dict,
                   served: dict, atol: float, resized=None) -> dict:
    """``check`` (served vs the scripted module, failed) named SCRIPTED_DIFFERS where the
    eager rebuild disagrees with the scripted module and agrees with the served one."""
    ref = _guarded(lambda: run_torch(eager, batch[i:i + 1]))
    if isinstance(ref, str):
        return check
    eager_ref = reference_form(ref[0])
    served_vs_eager = compare(eager_ref, served, atol, resized)["verdict"]
    scripted_vs_eager = compare(reference_form(scripted), eager_ref, atol, resized)["verdict"]
    if served_vs_eager in PASSING and scripted_vs_eager not in PASSING:
        return {**check, "verdict": SCRIPTED_DIFFERS, "scripted_verdict": check["verdict"],
                "served_vs_eager": served_vs_eager}
    return check


class _Float64:
    """The reference module copied to float64 on first use; ``run`` gives None where it
    does not convert or run in float64 (e.g. a scripted graph's float32 constants)."""

    def __init__(self, module):
        self.module, self.copy, self.tried = module, None, False

    def run(self, images: np.ndarray):
        import copy

        if not self.tried and self.module is not None:
            self.tried = True
            self.copy = _guarded(lambda: copy.deepcopy(self.module).double())
        ref = (_guarded(lambda: run_torch(self.copy, images, "float64"))
               if self.copy is not None and not isinstance(self.copy, str) else None)
        return None if isinstance(ref, str) else ref


def _against_float64(check: dict, in_float64: _Float64, batch: np.ndarray, i: int,
                     want: dict, served: dict, atol: float, resized=None) -> dict:
    """``check`` (served vs torch, failed) named FLOAT32_ROUNDING where the same module
    in float64 matches the served model and disagrees with torch's float32 run."""
    ref = None if check["verdict"] in ("error", "shape") else in_float64.run(batch[i:i + 1])
    if ref is None:
        return check
    exact = {k: np.asarray(v) for k, v in reference_form(ref[0]).items()}
    served_vs_float64 = compare(exact, served, atol, resized)
    float32_vs_float64 = compare(exact, reference_form(want), atol, resized)["verdict"]
    if served_vs_float64["verdict"] in PASSING and float32_vs_float64 not in PASSING:
        return {**check, "verdict": FLOAT32_ROUNDING, "float32_verdict": check["verdict"],
                "served_vs_float64": served_vs_float64["verdict"],
                "float64_errors": served_vs_float64["errors"]}
    return check


def _guarded(run):
    try:
        return run()
    except Exception as e:  # noqa: BLE001  (a reference that raises is a failed check)
        return short_message(e)


def summary(checks: Sequence[dict]) -> str:
    """One line: how many image checks passed, and how many of those by tie order,
    across a pixel boundary or by torch's float32 rounding."""
    passed = [c for c in checks if c["verdict"] in PASSING]
    ties = [c for c in passed if c["verdict"] == TIE_ORDER]
    straddled = [c for c in passed if c["verdict"] == BOUNDARY]
    scripted = [c for c in checks if c["verdict"] == SCRIPTED_DIFFERS]
    exported = [c for c in checks if c["verdict"] == EXPORT_DIFFERS]
    rounded = [c for c in passed if c["verdict"] == FLOAT32_ROUNDING]
    return (f"{len(passed)} of {len(checks)} image checks passed"
            + (f" ({len(ties)} with detections of equal scores in another order, or "
               "the other of two overlapping ones kept)"
               if ties else "")
            + (f" ({len(straddled)} with a detection whose box, within tolerance, lies "
               "across the pixel boundary that sizes its mask or keypoint heatmap: that "
               "output differs by a pixel's worth)" if straddled else "")
            + (f" ({len(rounded)} where torch's float32 run differs from the same model "
               "in float64 and the served model matches the float64 run: torch's own "
               "rounding took a threshold the other way)" if rounded else "")
            + (f"; on {len(scripted)} image(s) the scripted model differs from the same "
               "weights run eagerly and the served model matches the eager run "
               "(torchvision's scripted code path, e.g. its resize rounding): hand over "
               "the state_dict with its builder, or a torch.onnx.export of the eager "
               "model, to serve what torchvision runs eagerly" if scripted else "")
            + (f"; on {len(exported)} image(s) torch's own ONNX export differs from torch "
               "and the served model matches onnxruntime on that export (a code path "
               "torchvision takes only under tracing, e.g. its keypoint decoding): the "
               "export's difference, not the conversion's" if exported else ""))
