"""The importer's route for ``task="detection"`` (detection.py): export as torchvision
documents it (torch sources), convert, save with the TF Object Detection API's
signature and torchvision's (detection_wrap.py), check image by image
(detection_verify.py), and write the report. convert.import_model calls it; no
TFX imports.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import List, Optional, Sequence, Tuple

from tfx_bridge.artifacts import savedmodel
from tfx_bridge.artifacts.savedmodel import SERVING_SIGNATURE
from tfx_bridge.components.pytorch_model_importer import (
    detection,
    detection_verify,
    detection_wrap,
    rewrite,
    to_tf,
)
from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError
from tfx_bridge.components.pytorch_model_importer.report import write_report
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec
from tfx_bridge.components.pytorch_model_importer.source import (
    SOURCE_ONNX,
    SOURCE_TORCHSCRIPT,
    ModelSource,
    load_torch_module,
    rebuilt_from_script,
)
from tfx_bridge.components.pytorch_model_importer.verify import (
    DEFAULT_ATOL,
    DEFAULT_BATCH_SIZES,
)
from tfx_bridge.storage import fs

SERVING_DIR = savedmodel.SERVING_DIR


def import_detector(job, output_dir: str, shown_source: ModelSource,
                    digest: Optional[str]) -> Tuple[bool, dict, str, List[str]]:
    """(blessed, report, serving folder, served outputs) of a detector (detection.py),
    for convert.py's job ``job``: exported as torchvision documents it (torch sources),
    converted, saved with the Object Detection API's signature and torchvision's,
    and checked image by image (detection_verify.py)."""
    source, spec = job.source, job.inputs[0]
    if job.transform_dir or job.examples_dir:
        raise ImporterConfigError(
            "A detector is imported without a Transform graph or Examples: it takes "
            "images, and its check images are generated.")
    serving_dir = os.path.join(output_dir, SERVING_DIR)
    # Detections' own default unless the tolerance was set: boxes and scores pass
    # through NMS and RoiAlign, where float32 rounding compounds (detection_verify.py).
    atol = detection_verify.DEFAULT_ATOL if job.atol == DEFAULT_ATOL else job.atol
    start = time.perf_counter()
    module = load_torch_module(source) if source.kind != SOURCE_ONNX else None
    # A scripted detector's graph does not export (torch's exporter refuses
    # torchvision's scripted classes): the module it was made from is exported, and
    # the scripted one stays the reference it is checked against.
    rebuilt = source.kind == SOURCE_TORCHSCRIPT and bool(source.module_class)
    exported_from = rebuilt_from_script(source, module) if rebuilt else module
    types = rewrite.module_types(exported_from) if module is not None else {}
    # The export resizes images to the size the reference computes (detection.resize_as).
    resized_as = detection.RESIZE_SCRIPTED if rebuilt else detection.RESIZE_EAGER
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-import-") as work:
        onnx_path = os.path.join(work, "model.onnx")
        traced: List[str] = []
        if module is not None:
            raw_names = detection.export_detector(exported_from, onnx_path, job.opset,
                                                  traced, resized_as)
            raw_input = detection.RAW_INPUT
        else:
            raw_input, raw_names = detection.onnx_io(source.path)
            shutil.copyfile(source.path, onnx_path)
        k, k_from = detection.detections_per_image(exported_from, job.max_detections)
        to_convert = os.path.join(work, "model_to_convert.onnx")
        shutil.copyfile(onnx_path, to_convert)
        if job.tamper_onnx is not None:
            job.tamper_onnx(to_convert)
        exported = time.perf_counter()
        job.say(f"exported to ONNX in {exported - start:.1f}s" if module is not None
                else "read the ONNX file")
        image = TensorSpec(raw_input, "float32", (3, -1, -1))
        conversion = to_tf.to_saved_model(to_convert, work, [image], types, job.converter,
                                          job.graph_rewrites)
        if os.path.exists(serving_dir):
            shutil.rmtree(serving_dir)
        os.makedirs(output_dir, exist_ok=True)
        detection_wrap.wrap_detector(conversion.saved_model, serving_dir, spec, raw_names, k)
        converted_at = time.perf_counter()
        job.say(f"converted with {conversion.converter} and wrapped in "
                f"{converted_at - exported:.1f}s")
        batch_sizes = (job.batch_sizes if tuple(job.batch_sizes) != DEFAULT_BATCH_SIZES
                       else detection_verify.DEFAULT_BATCH_SIZES)
        checks = detection_verify.verify(serving_dir, onnx_path, spec, raw_names, module,
                                         atol, batch_sizes,
                                         eager=exported_from if rebuilt else None)
    verified = time.perf_counter()
    summary = detection_verify.summary(checks)
    job.say(f"verified at batch sizes {list(batch_sizes)} against "
            f"{'torch and ' if module is not None else ''}onnxruntime in "
            f"{verified - converted_at:.1f}s: {summary}")
    blessed = bool(checks) and all(c["verdict"] in detection_verify.PASSING for c in checks)
    outputs = detection.served_outputs(raw_names)
    report = {
        "blessed": blessed,
        "task": detection.TASK_DETECTION,
        "source": {"kind": source.kind,
                   "path": shown_source.path if fs.is_remote(shown_source.path)
                   else os.path.abspath(shown_source.path),
                   "module_class": source.module_class,
                   # The TorchScript file's scripted module, rebuilt as module_class
                   # for the export; the checks' torch reference is the scripted one.
                   "rebuilt_from_torchscript": rebuilt},
        "opset": job.opset if module is not None else None,
        "inputs": [spec.to_text()],
        "representative_inputs": [detection.representative_input(spec)],
        "model_inputs": [f"{raw_input}:float32:3,-1,-1"],
        "outputs": outputs,
        "detection": {
            "detections_per_image": k, "detections_per_image_from": k_from,
            "model_outputs": raw_names,
            "boxes": "ymin, xmin, ymax, xmax normalised by the input image's height and "
                     "width (the model's pixel boxes divided by them)",
            "classes": "the model's labels as float32 (torchvision: 0 is background)",
            "input_scale": f"{spec.dtype} in [0, 255], divided by 255 for the model",
            "padding": f"zeros after num_detections, to {k}",
            # How torchvision's resized size is computed in the graph: as the eager or
            # the scripted module computes it (None: the ONNX file's own graph).
            "resize_size_as": resized_as if module is not None else None,
            # torch's TracerWarnings in the export (torchvision traces its input checks).
            "trace_warnings": traced,
        },
        "transform": None,
        "signatures": {
            SERVING_SIGNATURE: f"{spec.name}: {spec.dtype} [B, H, W, 3] -> "
                               + ", ".join(outputs) + " (TF Object Detection API)",
            detection.RAW_SIGNATURE: f"{detection.RAW_INPUT}: float32 [3, H, W] in [0, 1] -> "
                                     + ", ".join(raw_names) + " (torchvision's layout)"},
        "tolerance": {"atol": atol,
                      "boxes": "atol x max(1, largest box coordinate)",
                      "keypoints": "atol x max(1, largest box coordinate)",
                      "keypoints_scores": "atol x max(1, largest keypoint score)",
                      "scores": "atol", "labels_and_counts": "exact",
                      "masks": f"pixels > {detection_verify.MASK_THRESHOLD}, at most "
                               f"{detection_verify.MASK_FLIPS:.1%} of a mask's pixels flip "
                               "(a pixel within atol of the threshold may)",
                      "ties": f"scores within {detection_verify.TIE_ATOL} may swap order "
                              "(verdict tie-order, said in the summary)",
                      "pixel_boundary": "a detection off only in its mask or keypoints, whose "
                                        "two boxes (within tolerance) size them differently "
                                        "(verdict pixel-boundary, said in the summary)",
                      "float32_rounding": "torch's float32 run differs from the same module "
                                          "in float64 and the served model matches the "
                                          "float64 run (verdict float32-rounding, said in "
                                          "the summary)"},
        "inputs_from": "generated images (smooth random fields plus noise)",
        "max_abs_error": _largest(checks, ("boxes", "scores")),
        "summary": summary,
        "rewrites": [r.to_json() for r in conversion.rewrites],
        "trace_warnings": None,
        "export_check": None,
        "converter": conversion.converter,
        "conversion_attempts": conversion.attempts,
        "source_digest": digest,
        "row_wise_retry_after_s": None,
        "seconds": {"export": round(exported - start, 2),
                    "convert": round(converted_at - exported, 2),
                    "verify": round(verified - converted_at, 2)},
        "checks": checks,
    }
    write_report(output_dir, report)
    return blessed, report, serving_dir, outputs


def _largest(checks: Sequence[dict], keys: Sequence[str]) -> Optional[float]:
    values = [c["errors"][k] for c in checks for k in keys if k in (c.get("errors") or {})]
    return max(values) if values else None
