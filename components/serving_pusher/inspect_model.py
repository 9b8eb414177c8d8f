"""Fresh-process load of a SavedModel, run by serving.inspect_model() as ``python -m``.

Arguments: the SavedModel folder, a warmup file (or ""), the TFLite file name. Loads
the model (and model.tflite when present), lists signatures, replays the warmup
requests through both, and prints ``INSPECT <json>``. An untrusted model that crashes
its loader crashes only this process.
"""


def main() -> None:
    import json
    import os
    import sys
    import time
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    path, warmup, tflite_file = sys.argv[1], sys.argv[2], sys.argv[3]
    model = tf.saved_model.load(path)
    sigs = {}
    for name, fn in model.signatures.items():
        ins = {k: {"dtype": v.dtype.name, "shape": v.shape.as_list()}
               for k, v in fn.structured_input_signature[1].items()}
        outs = {k: {"dtype": v.dtype.name, "shape": v.shape.as_list()}
                for k, v in fn.structured_outputs.items()}
        sigs[name] = {"inputs": ins, "outputs": outs}
    out = {"signatures": sigs, "warmup": None, "tflite": None}
    runners = {}
    if os.path.exists(os.path.join(path, tflite_file)):
        # What TF Serving serves under --prefer_tflite_model: check and warm it too.
        interpreter = tf.lite.Interpreter(model_path=os.path.join(path, tflite_file), num_threads=1)
        lite = {}
        for name in interpreter.get_signature_list():
            runner = interpreter.get_signature_runner(name)
            runners[name] = runner
            lite[name] = {
                "inputs": {k: v["dtype"].__name__ for k, v in runner.get_input_details().items()},
                "outputs": {k: v["dtype"].__name__ for k, v in runner.get_output_details().items()}}
        out["tflite"] = {"signatures": lite, "warmup": None}
    if warmup and os.path.exists(warmup):
        from tensorflow_serving.apis import prediction_log_pb2
        requests = []
        for record in tf.data.TFRecordDataset(warmup):
            log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            req = log.predict_log.request
            requests.append((req.model_spec.signature_name or "serving_default",
                             {k: tf.make_ndarray(v) for k, v in req.inputs.items()}))
        start = time.perf_counter()
        for name, feeds in requests:
            model.signatures[name](**feeds)
        out["warmup"] = {"requests": len(requests),
                         "seconds": round(time.perf_counter() - start, 4)}
        if runners:
            start = time.perf_counter()
            try:
                for name, feeds in requests:
                    runners[name](**feeds)
                out["tflite"]["warmup"] = {"requests": len(requests),
                                           "seconds": round(time.perf_counter() - start, 4)}
            except Exception as e:  # reported after the signature check, which names more
                out["tflite"]["warmup"] = {"error": f"{type(e).__name__}: {e}"}
    print("INSPECT " + json.dumps(out))


if __name__ == "__main__":
    main()
