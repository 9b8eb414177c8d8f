"""TF-TRT conversion, run by optimize.convert_tensorrt() as ``python -m`` in a child process.

Argument: a JSON spec (source, out, precision, op_denylist, TRT options, feeds per batch).
Converts, builds engines ahead from the feeds, saves, and prints ``TRT_SUMMARY <json>``
(the converter's segment summary). A crash here cannot take the executor down.
"""


def main() -> None:
    import json
    import os
    import sys
    spec = json.loads(sys.argv[1])
    os.environ["TF_TRT_OP_DENYLIST"] = ",".join(spec["op_denylist"])
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.compiler.tensorrt import trt_convert as trt
    feeds = {int(b): {k: np.asarray(v, dtype=spec["dtypes"][k]) for k, v in f.items()}
             for b, f in spec["feeds"].items()}
    params = trt.TrtConversionParams(
        precision_mode=spec["precision"].upper(),
        max_workspace_size_bytes=int(spec["workspace_bytes"]),
        minimum_segment_size=int(spec["minimum_segment_size"]),
        maximum_cached_engines=int(spec["maximum_cached_engines"]),
        use_calibration=spec["precision"] == "int8")
    converter = trt.TrtGraphConverterV2(input_saved_model_dir=spec["source"],
                                        input_saved_model_signature_key="serving_default",
                                        conversion_params=params, use_dynamic_shape=True,
                                        dynamic_shape_profile_strategy="Range")
    names = sorted(spec["dtypes"])
    def batches():
        for b in sorted(feeds):
            yield tuple(tf.constant(feeds[b][n]) for n in names)

    converter.convert(calibration_input_fn=batches if spec["precision"] == "int8" else None)
    converter.build(input_fn=batches)  # engines built ahead, not on the first request
    converter.save(spec["out"])
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        converter.summary()
    print("TRT_SUMMARY " + json.dumps(buf.getvalue()))


if __name__ == "__main__":
    main()
