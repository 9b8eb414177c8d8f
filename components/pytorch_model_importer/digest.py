"""The importer's source digest: what the SavedModel is made from, hashed by content
(the pusher's "same model" identity, docs/ARCHITECTURE.md). No TFX imports; local
paths only (convert stages remote sources first)."""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Optional, Sequence

from tfx_bridge.components.pytorch_model_importer.source import (
    SOURCE_ONNX,
    SOURCE_STATE_DICT,
    ModelSource,
    _all_tensors,
    external_location,
    model_folder,
)
from tfx_bridge.storage import fs

# ImporterConfig's fields, each in one group (a test holds every field to one):
# settings that change the served graph or its verdict, hashed as set;
DIGEST_SETTINGS = ("opset", "atol", "rtol", "converter", "graph_rewrites", "task",
                   "max_detections")
# what the model is and its signature, hashed as resolved (the content of the
# model file, the module, the input and output specs), whichever folder or spec
# they came from;
RESOLVED_FIELDS = ("source_kind", "source_path", "module_class", "module_kwargs", "inputs",
                   "output_names")
# and what decides only how a run ends (the executor raises on a model not
# blessed): the same model either way.
NOT_HASHED = ("fail_on_not_equivalent",)


def digest_settings(config) -> dict:
    """The ``settings`` of :func:`source_digest` for an ImporterConfig."""
    return {name: getattr(config, name) for name in DIGEST_SETTINGS}


def source_digest(source: ModelSource, inputs: Sequence[str], outputs: Sequence[str],
                  settings: dict, transform_dir: Optional[str]) -> str:
    """sha256 of what the SavedModel is made from: the model's content, the declared
    signature and module, the conversion settings and the Transform graph.

    Content, not file bytes, where the bytes carry where and when a file was made:
    a state_dict is hashed as its tensors (name, dtype, shape, values), an ONNX
    file with its external data files, and a Transform graph without its derived
    fingerprint and with the run's own temp paths (TFT names its lookup tables
    after the vocabulary file it wrote) cut out. So the same trained weights, spec
    and transform graph are the same model whichever run produced them, and the
    pusher adds no version for them. Local paths only (convert stages remote
    sources first).
    """
    import tfx_bridge

    h = hashlib.sha256(json.dumps({
        "kind": source.kind, "module_class": source.module_class,
        "module_kwargs": source.module_kwargs or {}, "inputs": list(inputs),
        "outputs": list(outputs), "tfx_bridge": tfx_bridge.__version__, **settings},
        sort_keys=True, default=str).encode())
    _hash_model(h, source)
    if transform_dir:
        for rel in sorted(fs.files_under(transform_dir)):
            if fs.basename(rel) in _DERIVED_FILES:
                continue
            h.update(b"\0" + rel.encode() + b"\0")
            path = fs.join(transform_dir, rel)
            if fs.basename(rel) == "saved_model.pb":
                h.update(_canonical_saved_model(path))
            else:
                fs.hash_file(h, path)
    return h.hexdigest()


# fingerprint.pb is a checksum of the SavedModel's other files, which are hashed.
_DERIVED_FILES = ("fingerprint.pb",)
# Where TFT's analyzers wrote their outputs during the run, e.g.
# <transform_graph uri>/.temp_path/tftransform_tmp/<vocabulary>: embedded in the
# graph as table names, different in every run.
# From the string's opening quote in the text form (spaces and escapes included).
_TFT_TEMP = re.compile(rb'"[^"\n]*?/\.temp_path/tftransform_tmp/')


def _hash_model(h, source: ModelSource) -> None:
    h.update(b"\0model\0")
    if source.kind == SOURCE_STATE_DICT and _hash_tensors(h, source.path):
        return
    fs.hash_file(h, source.path)
    if source.kind == SOURCE_ONNX:
        for location in _external_locations(source.path):
            h.update(b"\0" + location.encode() + b"\0")
            fs.hash_file(h, os.path.join(os.path.dirname(source.path), location))


def _hash_tensors(h, path: str) -> bool:
    """Hashes a state_dict file's tensors in key order; False where it is not one
    (the loader refuses it later, with its own message)."""
    try:
        import torch

        state = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]
        if not isinstance(state, dict) or not all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
            return False
        tensors = hashlib.sha256()  # fed tensor by tensor: no second copy of the weights
        for key in sorted(state):
            tensor = state[key].detach().contiguous()
            tensors.update(f"\0{key}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
            tensors.update(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
    except Exception:  # noqa: BLE001  (not loadable as tensors: hashed as bytes)
        return False
    h.update(tensors.digest())
    return True


def _external_locations(onnx_path: str) -> list:
    """The external data files an ONNX file names that lie inside its folder (the
    others are refused when it is loaded)."""
    import onnx

    try:
        model = onnx.load(onnx_path, load_external_data=False)
    except Exception:  # noqa: BLE001  (refused with its own message when loaded)
        return []
    folder = model_folder(onnx_path)
    found = set()
    for tensor in _all_tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        _, location, resolved = external_location(tensor, folder)
        if resolved is not None and fs.isfile(resolved):
            found.add(location)
    return sorted(found)


def _canonical_saved_model(path: str) -> bytes:
    """A SavedModel's graph with the producing run's temp paths cut out: its text
    form (maps in key order), or the raw bytes where no such path occurs."""
    data = fs.read_bytes(path)
    if b"/.temp_path/tftransform_tmp/" not in data:
        return data
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(data)
    return _TFT_TEMP.sub(b'"<tftransform_tmp>/',
                         text_format.MessageToString(proto).encode())
