"""A detector's fresh-process check, run by detection_verify.serve_fresh as ``python -m``.

oneDNN is off before TensorFlow is imported: stock TF Serving CPU builds run TF's
own kernels. Arguments: the SavedModel folder, the request (npz, one batch of
images per key ``0``, ``1``, ...), the answer path (npz, ``<batch>::<output>``)
and a JSON spec (``input``, ``outputs``, ``batches``). Prints one line
``TFX_BRIDGE_DETECT {"errors": {batch: message}}``.
"""
import os

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"


def main() -> None:
    import json
    import sys

    import numpy as np
    import tensorflow as tf

    from tfx_bridge.artifacts.savedmodel import SERVING_SIGNATURE
    from tfx_bridge.components.pytorch_model_importer import detection_verify
    from tfx_bridge.errors import short_message

    saved_model_dir, request, answer, spec_text = sys.argv[1:5]
    spec = json.loads(spec_text)
    serve = tf.saved_model.load(saved_model_dir).signatures[SERVING_SIGNATURE]
    errors, arrays = {}, {}
    with np.load(request) as data:
        for i in range(spec["batches"]):
            try:
                out = serve(**{spec["input"]: tf.constant(data[str(i)])})
                arrays.update({f"{i}::{n}": out[n].numpy() for n in spec["outputs"]})
            except Exception as e:  # noqa: BLE001  (reported as a failed check)
                errors[str(i)] = short_message(e)
    np.savez(answer, **arrays)
    print(detection_verify.CHILD_MARKER + json.dumps({"errors": errors}), flush=True)


if __name__ == "__main__":
    main()
