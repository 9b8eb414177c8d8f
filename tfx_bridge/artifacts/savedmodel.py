"""Reading a SavedModel's signatures from saved_model.pb, without loading the graph,
and the TF Serving flags a SavedModel folder can need.

Shared by SchemaGuard (a model's inputs as the consumer contract),
TrtOptimizer (which records the flags) and ServingPusher (contract checks
against the served version; the flags go into the server manifest). No TFX
imports.
"""
from __future__ import annotations

from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs
from tfx_bridge.storage.folders import unsafe_links

# Where a Model artifact keeps its SavedModel (TFX's serving-model layout).
SERVING_DIR = "Format-Serving"
# The signatures every imported model has (docs/ARCHITECTURE.md): tensors in, and serialized
# tf.Examples in (for Evaluator and tf.Example clients).
SERVING_SIGNATURE = "serving_default"
EXAMPLE_SIGNATURE = "serving_tf_example"
# TF Serving runs XLA-compiled (jit_compile) functions on CPU only with this flag.
XLA_FLAG = "--xla_cpu_compilation_enabled=true"
# With this flag TF Serving serves TFLITE_FILE from the SavedModel folder when present
# (and the SavedModel when not), so it is safe server-wide.
TFLITE_FLAG = "--prefer_tflite_model=true"
TFLITE_FILE = "model.tflite"
SERVER_FLAGS = (XLA_FLAG, TFLITE_FLAG)


class SavedModelError(BridgeError):
    """A folder that is not a SavedModel (or Model artifact), or lacks a signature."""


def signature_specs(saved_model_dir: str, name: str) -> dict:
    """``{"inputs"|"outputs": {key: {"dtype": "float32", "shape": [None, 4] | None}}}``.

    ``shape`` is None for unknown rank; unknown dimensions are None. Raises
    :class:`SavedModelError` naming the file or the signatures found.
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    path = fs.join(saved_model_dir, "saved_model.pb")
    try:
        model = saved_model_pb2.SavedModel.FromString(fs.read_bytes(path))
    except Exception as e:
        raise SavedModelError(f"{path} is missing or not a SavedModel ({e}).") from e
    signatures = {}
    for graph in model.meta_graphs:
        signatures.update(graph.signature_def)
    if name not in signatures:
        raise SavedModelError(
            f"{saved_model_dir} has no {name} signature; it has {sorted(signatures)}.")

    def spec(info) -> dict:
        shape = (None if info.tensor_shape.unknown_rank else
                 [None if d.size < 0 else int(d.size) for d in info.tensor_shape.dim])
        return {"dtype": tf.dtypes.as_dtype(info.dtype).name, "shape": shape}

    return {"inputs": {k: spec(v) for k, v in signatures[name].inputs.items()},
            "outputs": {k: spec(v) for k, v in signatures[name].outputs.items()}}


def resolve_saved_model(path: str, check_entries: bool = True) -> str:
    """A SavedModel folder, or a Model artifact folder holding Format-Serving/. A
    local one is checked before TensorFlow reads it: a link leading out of it, or a
    FIFO, socket or device in it (TF's reader would block on it), is refused
    (``check_entries=False``: the caller checks and records it, as the pusher does)."""
    for folder in (path, fs.join(path, SERVING_DIR)):
        if fs.exists(fs.join(folder, "saved_model.pb")):
            problems = unsafe_links(folder) if check_entries else []
            if problems:
                raise SavedModelError(
                    f"{folder} has entries a reader must not follow or open: "
                    + "; ".join(problems) + ". Copy the real files into the model folder.")
            return folder
    raise SavedModelError(
        f"{path} is neither a SavedModel (no saved_model.pb) nor a Model artifact folder "
        f"(no {SERVING_DIR}/saved_model.pb). Give the folder holding saved_model.pb, or the "
        "importer's or optimizer's output folder.")
