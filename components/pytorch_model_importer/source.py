"""The model a research team hands over: a TorchScript file, a state_dict + class, or ONNX.

Import stage 1 of the importer (convert.py runs the stages). No TFX imports;
torch and onnx are imported lazily (the ``onnx`` extra). Also what the
imported Model artifact carries about its source, written by the core so the
component and ``tfx-bridge import-model`` write the same artifact: the
``Format-PyTorch/`` copy (warm starts) and the source digest (the pusher's
"nothing new" identity).
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Dict, Optional, Sequence, Tuple

from tfx_bridge import limits
from tfx_bridge.components.pytorch_model_importer.errors import (
    ImporterConfigError,
    ModelSourceError,
    missing_extra,
)
from tfx_bridge.storage import fs
from tfx_bridge.torch import model as torch_model

SOURCE_TORCHSCRIPT = "torchscript"
SOURCE_STATE_DICT = "state_dict"
SOURCE_ONNX = "onnx"
SOURCES = (SOURCE_TORCHSCRIPT, SOURCE_STATE_DICT, SOURCE_ONNX)


def lazy_torch():
    try:
        import torch
    except ImportError as e:
        raise missing_extra("torch", e) from e
    return torch


def lazy_onnx():
    try:
        import onnx
    except ImportError as e:
        raise missing_extra("onnx", e) from e
    return onnx


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where the model comes from (``kind`` one of SOURCES)."""

    kind: str
    path: str
    module_class: Optional[str] = None
    module_kwargs: Optional[dict] = None

    def __post_init__(self):
        if self.kind not in SOURCES:
            raise ImporterConfigError(f"Model source kind {self.kind!r}: use one of {SOURCES}.")
        if self.kind == SOURCE_STATE_DICT and not self.module_class:
            raise ImporterConfigError(
                "A state_dict source needs --module-class pkg.module:ClassName (and "
                "--module-kwargs JSON for its constructor).")
        if self.kind == SOURCE_ONNX and self.module_class:
            raise ImporterConfigError(
                "--module-class is for state_dict and TorchScript sources, not onnx.")
        if fs.isdir(self.path):
            raise ModelSourceError(
                f"{self.path} is a folder; give the model file inside it (e.g. "
                f"{fs.join(self.path, 'model.pt')}).")
        if not fs.isfile(self.path):
            raise ModelSourceError(f"Model file {self.path} does not exist.")
        fs.check_regular(self.path)  # torch and onnx would block on a FIFO


def load_torch_module(source: ModelSource):
    """The torch module of a TorchScript or state_dict source, in eval mode (a TorchScript
    source's own module, even when it names a class: see :func:`rebuilt_from_script`)."""
    torch = lazy_torch()
    if source.kind == SOURCE_TORCHSCRIPT:
        try:
            return torch.jit.load(source.path, map_location="cpu").eval()
        except Exception as e:
            raise ModelSourceError(
                f"{source.path}: not a TorchScript file ({type(e).__name__}: {e}). Save it with "
                "torch.jit.script(model).save(path) or torch.jit.trace, or give --state-dict "
                "with --module-class.") from e
    return _built(source, _read_state_dict(source))


def rebuilt_from_script(source: ModelSource, scripted):
    """The Python module ``source.module_class(**module_kwargs)`` holding the weights of
    ``scripted`` (a TorchScript source's module), in eval mode: the module a scripted
    model was made from, for an export its scripted graph does not allow.

    Raises ModelSourceError when the weights do not fit, or when a setting both modules
    hold (a plain number, flag, string or tuple attribute, e.g. a detector's
    ``roi_heads.detections_per_img`` or ``transform.min_size``) differs: the keyword
    arguments are not the ones the scripted model was built with.
    """
    module = _built(source, dict(scripted.state_dict()))
    differ = []
    scripted_parts = dict(scripted.named_modules())
    for path, part in module.named_modules():
        other = scripted_parts.get(path)
        if other is None:
            continue
        for name, value in vars(part).items():
            if name.startswith("_") or name == "training" or not _plain(value) \
                    or not hasattr(other, name):
                continue
            theirs = getattr(other, name)
            if _plain(theirs) and _as_plain(theirs) != _as_plain(value):
                differ.append(f"{path + '.' if path else ''}{name}: scripted {theirs!r}, "
                              f"rebuilt {value!r}")
    if differ:
        raise ModelSourceError(
            f"{source.path} was not built as {source.module_class}(**"
            f"{source.module_kwargs or {}}): {'; '.join(differ[:5])}"
            + (f"; and {len(differ) - 5} more" if len(differ) > 5 else "")
            + ". Pass the --module-kwargs the scripted model was built with.")
    return module


def _plain(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, (bool, int, float, str)) for v in value)
    return isinstance(value, (bool, int, float, str))


def _as_plain(value):
    return [float(v) if isinstance(v, (int, float)) else v for v in value] \
        if isinstance(value, (list, tuple)) else value


def _read_state_dict(source: ModelSource) -> dict:
    torch = lazy_torch()
    try:
        state = torch.load(source.path, map_location="cpu", weights_only=True)
    except Exception as e:
        import re

        # torch's own text is ANSI-coloured and advises loading with weights_only=False,
        # which would run the file's pickled code: say what the file is instead.
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
        what = ("pickled Python objects (a whole module saved with torch.save(model)?)"
                if "Weights only load failed" in text
                else f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}")
        raise ModelSourceError(
            f"{source.path}: not a plain state_dict ({what}). Only tensors are loaded "
            "(weights_only=True), never pickled code: save with "
            "torch.save(model.state_dict(), path).") from e
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):  # e.g. a TorchScript archive's loaded module
        raise ModelSourceError(
            f"{source.path}: holds a {type(state).__name__}, not a state_dict (a dict of "
            "tensors). A TorchScript file goes with --torchscript; otherwise save with "
            "torch.save(model.state_dict(), path).")
    return state


def _built(source: ModelSource, state: dict):
    """``source.module_class(**module_kwargs)`` with ``state`` loaded, in eval mode."""
    try:
        cls = torch_model.import_module_class(source.module_class)
    except torch_model.TorchModelError as e:
        raise ImporterConfigError(f"--module-class: {e}") from e
    try:
        module = torch_model.build_module(cls, source.module_kwargs or {},
                                          f"{source.module_class}(**{source.module_kwargs})")
    except TypeError as e:
        raise ImporterConfigError(
            f"{source.module_class}(**{source.module_kwargs}) failed: {e}. Fix "
            "--module-kwargs.") from e
    try:
        missing, unexpected = module.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shapes that do not fit: constructor kwargs differ
        lines = [ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln]
        shown = "; ".join(lines[:3]) + (f"; and {len(lines) - 3} more" if len(lines) > 3 else "")
        raise ModelSourceError(
            f"{source.path} does not fit {source.module_class}(**{source.module_kwargs or {}}): "
            f"{shown or str(e).splitlines()[0]}. Pass the --module-kwargs the weights were "
            "trained with.") from e
    if missing or unexpected:
        raise ModelSourceError(
            f"{source.path} does not fit {source.module_class}: missing keys {list(missing)}, "
            f"unexpected keys {list(unexpected)}. Check --module-kwargs and the class version.")
    return module.eval()


def _all_tensors(graph):
    """Every TensorProto a graph holds: initializers, sparse initializers, and tensors in
    node attributes (``Constant``), in subgraphs (If/Loop bodies) too."""
    from onnx import AttributeProto

    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == AttributeProto.TENSORS:
                yield from attr.tensors
            elif attr.type == AttributeProto.SPARSE_TENSOR:
                yield attr.sparse_tensor.values
                yield attr.sparse_tensor.indices
            elif attr.type == AttributeProto.GRAPH:
                yield from _all_tensors(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _all_tensors(g)


def check_external_data(onnx_path: str) -> None:
    """Refuses external-data locations that resolve outside the model's folder.

    Every tensor is checked (initializers, ``Constant`` node values, subgraphs), and
    locations are resolved through symlinks: a link inside the folder that points
    outside it is refused like a ``../`` path.
    """
    onnx = lazy_onnx()
    try:
        model = onnx.load(onnx_path, load_external_data=False)
    except Exception as e:  # protobuf's DecodeError and kin: not what the flag said
        raise ModelSourceError(
            f"{onnx_path}: not an ONNX file ({type(e).__name__}). A PyTorch file goes with "
            "--torchscript (torch.jit.save) or --state-dict (torch.save(model.state_dict()))."
        ) from e
    folder = model_folder(onnx_path)
    bad, short, declared = [], [], 0
    for tensor in _all_tensors(model.graph):
        declared += _declared_bytes(onnx, tensor)
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info, location, resolved = external_location(tensor, folder)
        if resolved is None:
            named = location and "\0" not in location
            bad.append(f"{tensor.name!r} -> {location!r}" + ("" if named
                                                             else " (not a file name)"))
            continue
        # Without a length, the tensor's declared bytes are what onnx will read.
        end = _int(info.get("offset", "0")) + (_int(info["length"]) if "length" in info
                                               else _declared_bytes(onnx, tensor))
        have = fs.size(resolved) if fs.isfile(resolved) else None
        if have is None or end > have:
            short.append(f"{tensor.name!r} needs bytes up to {end:,} of {location!r}, "
                         f"which {'is missing' if have is None else f'holds {have:,}'}")
    if bad:
        raise ModelSourceError(
            f"{onnx_path}: external data outside the model's folder ({', '.join(bad)}). "
            "Keep weight files next to the .onnx (relative locations) and re-export.")
    if short:
        raise ModelSourceError(
            f"{onnx_path}: external data files end early ({'; '.join(short)}): truncated "
            "or missing weights. Copy the whole model folder again.")
    # What the tensors declare, before onnx or the converter allocates any of it.
    limits.check_parameter_bytes(declared, onnx_path)


def model_folder(onnx_path: str) -> str:
    """The folder an ONNX file's external data locations are relative to (links resolved)."""
    return os.path.realpath(os.path.dirname(os.path.abspath(onnx_path)))


def external_location(tensor, folder: str) -> Tuple[Dict[str, str], str, Optional[str]]:
    """(external_data fields, location, resolved path) of a tensor stored outside its
    ONNX file; the path is None where the location is no file name (empty, a NUL
    byte) or resolves outside ``folder`` (absolute, ``..``, a link leading out)."""
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    if not location or "\0" in location or os.path.isabs(location):
        return info, location, None
    resolved = os.path.realpath(os.path.join(folder, location))
    return info, location, resolved if resolved.startswith(folder + os.sep) else None


def _int(text: str) -> int:
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def _declared_bytes(onnx, tensor) -> int:
    """dims x item size of a tensor (strings: 0; their bytes are in the file itself)."""
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except Exception:  # noqa: BLE001  (undefined or string type: nothing to allocate)
        return 0
    if tensor.data_type == onnx.TensorProto.STRING:
        return 0
    return math.prod(max(0, int(d)) for d in tensor.dims) * itemsize


def carry_pytorch(source: ModelSource, inputs: Sequence[str], outputs: Sequence[str],
                  model_dir: str) -> None:
    """Keeps the PyTorch form (state_dict + spec) in the imported Model, so the latest
    blessed model can warm-start the next training (docs/ARCHITECTURE.md)."""
    if source.kind != SOURCE_STATE_DICT:
        return
    target = torch_model.folder_of(model_dir)
    origin = fs.dirname(source.path)
    if fs.basename(origin.rstrip("/")) == torch_model.PYTORCH_DIR:
        fs.copy_tree(origin, target)  # a trainer's folder: spec, metrics, lineage
        return
    fs.makedirs(target)
    fs.copy(source.path, fs.join(target, torch_model.WEIGHTS_FILE))
    spec = torch_model.ModelSpec(source.module_class, dict(source.module_kwargs or {}),
                                 list(inputs), list(outputs))
    fs.write_text(fs.join(target, torch_model.SPEC_FILE), spec.to_json())


def resolve_source_path(folder: str, path: str) -> str:
    """``path`` inside the research team's folder, or the one model file there."""
    if path and not folder:
        return path  # ModelSource names a folder or a missing file
    if path:
        full = fs.join(folder, path)
        if not fs.isfile(full):
            raise ModelSourceError(f"No model file {path!r} in {folder or 'the local disk'}.")
        return full
    files = [f for f in fs.listdir(folder) if fs.isfile(fs.join(folder, f))]
    if len(files) != 1:
        raise ImporterConfigError(
            f"{folder} holds {files}; give source_path to say which file is the model.")
    return fs.join(folder, files[0])


def has_pytorch_spec(folder: str) -> bool:
    """Whether a model folder carries ``Format-PyTorch/`` with a spec."""
    return torch_model.has_model(torch_model.folder_of(folder))


def from_model_folder(folder: str, declared_inputs: Sequence[str],
                      declared_outputs: Sequence[str], module_class: Optional[str] = None,
                      kind: str = SOURCE_STATE_DICT, source_path: str = "",
                      module_kwargs: Optional[dict] = None):
    """The source, inputs and outputs of an import from a model folder (the component's
    ``source_model``, the CLI's ``--source-model``): read from its ``Format-PyTorch/``
    spec (PyTorchTrainer's) when it has one, else the declared ones; never both
    differently. Returns (ModelSource, input spec texts, output names).
    """
    declared_inputs, declared_outputs = list(declared_inputs), list(declared_outputs)
    pytorch = torch_model.folder_of(folder) if folder else ""
    if pytorch and torch_model.has_model(pytorch):
        try:
            spec = torch_model.read_spec(pytorch)
        except torch_model.TorchModelError as e:
            raise ModelSourceError(str(e)) from e
        declared = {"inputs": declared_inputs, "output_names": declared_outputs,
                    "module_class": module_class}
        from_spec = {"inputs": spec.inputs, "output_names": spec.outputs,
                     "module_class": spec.module_class}
        clash = [f"{k}: declared {declared[k]!r}, spec {from_spec[k]!r}"
                 for k in declared if declared[k] and declared[k] != from_spec[k]]
        if clash:
            raise ImporterConfigError(
                f"The source model's spec ({fs.join(pytorch, torch_model.SPEC_FILE)}) and the "
                "component disagree: " + "; ".join(clash) + ". Declare nothing on the "
                "component (the spec is where the model was trained), or fix the run_fn.")
        found = ModelSource(SOURCE_STATE_DICT, fs.join(pytorch, spec.weights),
                            spec.module_class, spec.module_kwargs)
        return found, spec.inputs, spec.outputs
    if not declared_inputs or not declared_outputs:
        raise ImporterConfigError(
            f"{folder or 'The source'} holds no {torch_model.PYTORCH_DIR}/"
            f"{torch_model.SPEC_FILE}: declare inputs and output_names (and module_class "
            "for a state_dict) on the component.")
    found = ModelSource(kind, resolve_source_path(folder, source_path), module_class,
                        module_kwargs or {})
    return found, declared_inputs, declared_outputs
