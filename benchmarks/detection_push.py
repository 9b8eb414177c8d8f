"""A torchvision Faster R-CNN from hand-over to a TF Serving base path, and a batch of
three images through the pushed version's ``serving_default``.

1. build ``fasterrcnn_resnet50_fpn`` as the detection catalog does (catalog_detection:
   ``weights=None``, BatchNorm calibrated, min_size 128 / max_size 160, score threshold
   0, 20 detections per image) and hand it over as a state_dict with its builder;
2. import it with ``task="detection"`` (the importer's checks: batches of 1, 3 and 8
   against torch and onnxruntime, fresh process, oneDNN off);
3. TrtOptimizer with its defaults (TF-TRT where TensorRT exists, its CPU rules here);
4. ServingPusher to a fresh base path with 3 warmup records, replayed through the
   loaded model;
5. in a fresh process with ``TF_ENABLE_ONEDNN_OPTS=0``: load the pushed version folder,
   call ``serving_default`` on 3 images of one size (uint8 ``[3, H, W, 3]``), and
   compare each image's detections with onnxruntime on torchvision's ONNX export;
   parse the warmup records and the pusher's configs as TF Serving reads them.

Writes benchmarks/results/detection_push.json.

    nice -n 5 .venv/bin/python benchmarks/detection_push.py [--model NAME] [--size H,W]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
RESULTS = os.path.join(BENCH_DIR, "results", "detection_push.json")

# The fresh process: the pushed version's serving_default on 3 images of one size,
# oneDNN off as stock TF Serving's CPU build runs.
_SERVE = """
import json, os, sys
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
import numpy as np
import tensorflow as tf
version_dir, images_file, out_file = sys.argv[1:4]
images = np.load(images_file)
model = tf.saved_model.load(version_dir)
out = model.signatures["serving_default"](images=tf.constant(images))
np.savez(out_file, **{k: v.numpy() for k, v in out.items()})
print("SERVED " + json.dumps({k: [list(v.shape), v.dtype.name] for k, v in out.items()}))
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="fasterrcnn_resnet50_fpn")
    parser.add_argument("--size", default="240,320", help="the three images' H,W")
    parser.add_argument("--results", default=RESULTS)
    args = parser.parse_args()
    h, w = (int(v) for v in args.size.split(","))

    import catalog_detection
    import numpy as np
    import onnxruntime as ort
    from google.protobuf import text_format
    from tensorflow_serving.apis import prediction_log_pb2
    from tensorflow_serving.config import model_server_config_pb2

    from tfx_bridge.artifacts import tensorspec
    from tfx_bridge.components.pytorch_model_importer import (
        convert,
        detection,
        detection_verify,
    )
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.serving_pusher import base_layout, serving
    from tfx_bridge.components.serving_pusher.config import PusherConfig
    from tfx_bridge.components.trt_optimizer import optimize

    row: dict = {"model": args.model, "size": [h, w]}
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-detection-push-") as work:
        start = time.perf_counter()
        built = catalog_detection.build(args.model)
        source = catalog_detection.hand_over(built, "state_dict", work, args.model)
        row["module_kwargs"] = built.module_kwargs
        log(f"{args.model}: importing")
        imported = convert.import_model(
            ImporterConfig.of_source(source, [], [], task="detection"),
            os.path.join(work, "imported"))
        row["import"] = {"blessed": imported.blessed, "summary": imported.report["summary"],
                         "seconds": round(time.perf_counter() - start, 1)}
        log(f"import: {row['import']}")
        start = time.perf_counter()
        optimized = optimize.optimize_local(os.path.join(work, "imported"),
                                            os.path.join(work, "optimized"))
        row["optimize"] = {"blessed": optimized.blessed, "backend": optimized.backend,
                           "decision": optimized.report["decision"]["reason"],
                           "batches": optimized.report["batches"],
                           "representative_inputs": optimized.report["representative_inputs"],
                           "seconds": round(time.perf_counter() - start, 1)}
        log(f"optimize: {row['optimize']}")
        base = os.path.join(work, "serving")
        pushed = serving.push_model(PusherConfig(base, "detector", warmup_records=3),
                                    os.path.join(work, "optimized"),
                                    imported_model_dir=os.path.join(work, "imported"))
        row["push"] = {"pushed": pushed.pushed, "version": pushed.version,
                       "reason": pushed.reason, "warmup": pushed.details.get("warmup")}
        log(f"push: {row['push']}")
        if not pushed.pushed:
            _write(args.results, row)
            return
        version_dir = os.path.join(base, "detector", str(pushed.version))
        warmup = os.path.join(version_dir, base_layout.WARMUP_DIR, base_layout.WARMUP_FILE)
        import tensorflow as tf

        shapes = []
        for record in tf.data.TFRecordDataset(warmup):
            log_ = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            request = log_.predict_log.request
            shapes.append({k: [d.size for d in v.tensor_shape.dim]
                           for k, v in request.inputs.items()})
        config = model_server_config_pb2.ModelServerConfig()
        text_format.Parse(open(os.path.join(base, base_layout.MODELS_CONFIG)).read(), config)
        batching = open(os.path.join(base, base_layout.BATCHING_FILE)).read()
        row["serving_files"] = {
            "warmup_requests": shapes,
            "models_config": [{"name": c.name, "base_path": c.base_path}
                              for c in config.model_config_list.config],
            "batching_parameters": batching.strip().splitlines()}

        # Three images of different content, of one size, as the importer's checks make
        # them (smooth shapes, not noise).
        images = detection.verification_images(
            tensorspec.TensorSpec("images", "uint8", (-1, h, w, 3)), 3, seed=7, size=(h, w))
        images_file, out_file = os.path.join(work, "images.npy"), os.path.join(work, "out.npz")
        np.save(images_file, images)
        proc = subprocess.run([sys.executable, "-c", _SERVE, version_dir, images_file,
                               out_file], capture_output=True, text=True, timeout=600)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("SERVED ")), None)
        if line is None:
            row["served"] = {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
            _write(args.results, row)
            return
        row["served"] = {"outputs": json.loads(line[len("SERVED "):])}
        # onnxruntime on torchvision's own ONNX export of the same model, image by image.
        onnx_path = os.path.join(work, "torchvision.onnx")
        catalog_detection.hand_over(built, "onnx", work, "torchvision")
        session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        raw = [o.name for o in session.get_outputs()]
        want = detection_verify.run_ort(onnx_path, images, raw, session)
        with np.load(out_file) as z:
            got = {k: z[k] for k in z.files}
        verdicts = [detection_verify.compare(detection_verify.reference_form(want[i]),
                                             detection_verify.unpadded(got, i, (h, w), raw),
                                             detection_verify.DEFAULT_ATOL)
                    for i in range(len(images))]
        row["served"]["against_onnxruntime"] = [
            {k: v for k, v in c.items() if k in ("verdict", "count", "tied_rows", "rows_off")}
            for c in verdicts]
        row["served"]["num_detections"] = got["num_detections"].tolist()
    _write(args.results, row)


def _write(path: str, row: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(row, f, indent=1, sort_keys=True)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
