"""TensorRT probe, run by detect.probe() as ``python -m`` in a child process.

``get_loaded_tensorrt_version()`` aborts the process when libnvinfer is missing, so it
is asked only after ``is_tensorrt_enabled()``, and only here. Prints one line
``TRT_PROBE <json>``.
"""


def main() -> None:
    import json
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    out = {"tensorrt": False, "gpus": 0, "linked": None, "loaded": None, "reason": ""}
    try:
        import tensorflow as tf
        from tensorflow.python.compiler.tensorrt import trt_convert
        out["gpus"] = len(tf.config.list_physical_devices("GPU"))
        enabled = bool(trt_convert._pywrap_py_utils.is_tensorrt_enabled())
        linked = trt_convert._pywrap_py_utils.get_linked_tensorrt_version()
        out["linked"] = ".".join(map(str, linked))
        if enabled:
            # Only safe once is_tensorrt_enabled() said the library is there.
            loaded = trt_convert._pywrap_py_utils.get_loaded_tensorrt_version()
            out["loaded"] = ".".join(map(str, loaded))
            out["tensorrt"] = True
        else:
            out["reason"] = ("libnvinfer " + str(out["linked"]) + " not found: TensorFlow is "
                             "linked against it but it is not installed")
    except Exception as e:
        out["reason"] = type(e).__name__ + ": " + str(e).splitlines()[0]
    print("TRT_PROBE " + json.dumps(out))


if __name__ == "__main__":
    main()
