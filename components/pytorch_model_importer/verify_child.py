"""The importer's fresh-process check, run by verify.serve_fresh as ``python -m``.

oneDNN is turned off before TensorFlow is imported: stock TF Serving CPU
builds run TF's own kernels, and a graph must be checked on those.

Arguments: the SavedModel folder, the request (npz, ``<batch>::<input>``), the
answer path (npz, ``<batch>::<output>`` and ``via::<output>``) and a JSON spec
(``inputs``, ``outputs``, ``batches``, ``via_batch``). Prints one line
``TFX_BRIDGE_VERIFY {"done": [...], "errors": {key: message}}``.
"""
import os

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"


def main() -> None:
    import json
    import sys

    import numpy as np
    import tensorflow as tf

    from tfx_bridge.artifacts.savedmodel import EXAMPLE_SIGNATURE, SERVING_SIGNATURE
    from tfx_bridge.components.pytorch_model_importer import signature, verify
    from tfx_bridge.errors import short_message

    saved_model_dir, request, answer, spec_text = sys.argv[1:5]
    spec = json.loads(spec_text)
    inputs = signature.parse_input_specs(spec["inputs"])
    outputs = spec["outputs"]
    loaded = tf.saved_model.load(saved_model_dir)
    serve = loaded.signatures[SERVING_SIGNATURE]
    done, errors, arrays = [], {}, {}
    with np.load(request) as data:
        feeds_by_batch = {b: {s.name: data[f"{b}::{s.name}"] for s in inputs}
                          for b in spec["batches"]}
    for batch, feeds in feeds_by_batch.items():
        try:
            out = serve(**{k: tf.constant(v) for k, v in feeds.items()})
            arrays.update({f"{batch}::{n}": out[n].numpy() for n in outputs})
            done.append(str(batch))
        except Exception as e:  # noqa: BLE001  (reported as a failed check)
            errors[str(batch)] = short_message(e)
            continue
        if batch == spec["via_batch"]:
            try:
                serialized = verify.examples_from_feeds(feeds, inputs)
                via = loaded.signatures[EXAMPLE_SIGNATURE](examples=tf.constant(serialized))
                arrays.update({f"via::{n}": via[n].numpy() for n in outputs})
                done.append("via")
            except Exception as e:  # noqa: BLE001
                errors["via"] = short_message(e)
    np.savez(answer, **arrays)
    print(verify.CHILD_MARKER + json.dumps({"done": done, "errors": errors}), flush=True)


if __name__ == "__main__":
    main()
