"""The PyTorch form of a model inside a Model artifact: ``Format-PyTorch/``.

PyTorchTrainer writes it (the user's ``run_fn`` calls :func:`save`);
PyTorchModelImporter reads it, so the module class, its constructor kwargs,
the serving inputs and the output names are declared once, where the model
is trained; the importer and TrtOptimizer carry it into their own Model
artifacts, so the latest *blessed* model still has the weights a warm start
needs (docs/ARCHITECTURE.md).

    Format-PyTorch/
      weights.pt         the state_dict: tensors only (loaded with weights_only=True)
      model_spec.json    {"module_class", "module_kwargs", "inputs", "outputs", "weights"}
      metrics.json       optional: eval-split numbers the trainer records as properties
      trained_on.json    the Examples the trainer read (a rerun on them re-emits the model)

torch is imported by the functions that need it; no TFX imports.

Example:
  >>> import tempfile, torch
  >>> folder = tempfile.mkdtemp()
  >>> spec = ModelSpec("torch.nn:Linear", {"in_features": 2, "out_features": 1},
  ...                  ["x:float32:-1,2"], ["y"])
  >>> save(folder, torch.nn.Linear(2, 1), spec)
  >>> read_spec(folder).outputs
  ['y']
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Dict, List, Optional

from tfx_bridge import limits
from tfx_bridge.artifacts import tensorspec
from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs
from tfx_bridge.torch import class_path

PYTORCH_DIR = "Format-PyTorch"
WEIGHTS_FILE = "weights.pt"
SPEC_FILE = "model_spec.json"
METRICS_FILE = "metrics.json"
TRAINED_ON_FILE = "trained_on.json"  # written by PyTorchTrainer: the Examples it read
_SPEC_KEYS = {"module_class", "module_kwargs", "inputs", "outputs", "weights"}


class TorchModelError(BridgeError):
    """A Format-PyTorch folder that cannot be read or does not fit the model."""


@dataclasses.dataclass
class ModelSpec:
    """What rebuilds and serves the module: ``pkg.mod:Class`` and its kwargs, the
    serving inputs as ``name:dtype:shape[:lo..hi]`` and the output names, in order."""

    module_class: str
    module_kwargs: Dict[str, Any]
    inputs: List[str]
    outputs: List[str]
    weights: str = WEIGHTS_FILE

    def __post_init__(self):
        problems = []
        if not isinstance(self.module_class, str) or ":" not in self.module_class:
            problems.append(f"module_class {self.module_class!r} is not 'pkg.mod:Class'")
        if not isinstance(self.module_kwargs, dict):
            problems.append("module_kwargs is not an object")
        try:
            tensorspec.parse_input_specs(list(self.inputs))
        except (tensorspec.TensorSpecError, TypeError) as e:
            problems.append(f"inputs: {e}")
        if (not isinstance(self.outputs, list) or not self.outputs
                or not all(isinstance(o, str) and o for o in self.outputs)):
            problems.append(f"outputs {self.outputs!r} is not a list of names")
        if self.weights != WEIGHTS_FILE:
            problems.append(f"weights {self.weights!r}: must be {WEIGHTS_FILE!r}")
        if problems:
            raise TorchModelError("Invalid model spec: " + "; ".join(problems) + ".")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


def folder_of(model_uri: str) -> str:
    """``Format-PyTorch/`` of a Model artifact."""
    return fs.join(model_uri, PYTORCH_DIR)


def has_model(folder: str) -> bool:
    return fs.isfile(fs.join(folder, SPEC_FILE))


def read_spec(folder: str) -> ModelSpec:
    """The spec in ``folder``; an unreadable or invalid one names the file and the fix."""
    path = fs.join(folder, SPEC_FILE)
    if not fs.isfile(path):
        raise TorchModelError(
            f"{path} does not exist: a PyTorch model folder holds {SPEC_FILE} and "
            f"{WEIGHTS_FILE} (written by tfx_bridge.torch.model.save in the run_fn).")
    # A spec is a few lines: a larger file is not one.
    data = limits.read_json(path, TorchModelError, "Rewrite it with tfx_bridge.torch.model.save.",
                            1 << 20)
    if not isinstance(data, dict) or set(data) - _SPEC_KEYS or not (
            _SPEC_KEYS - {"weights"} <= set(data)):
        raise TorchModelError(
            f"{path} must be an object with keys {sorted(_SPEC_KEYS)}; it has "
            f"{sorted(data) if isinstance(data, dict) else type(data).__name__}.")
    try:
        return ModelSpec(**data)
    except TorchModelError as e:
        raise TorchModelError(f"{path}: {e}") from e


def save(folder: str, model, spec: ModelSpec, metrics: Optional[Dict[str, float]] = None
         ) -> None:
    """Writes the state_dict, the spec and (optionally) eval metrics into ``folder``
    (a URI: written locally, then copied). Metrics must be finite numbers. In a
    distributed run only rank 0 writes (the ranks hold the same weights)."""
    import torch

    from tfx_bridge.torch import distributed

    if not distributed.is_primary():
        return

    bad = {k: v for k, v in (metrics or {}).items()
           if not isinstance(v, (int, float)) or not math.isfinite(v)
           or not tensorspec.NAME_PATTERN.fullmatch(k)}
    if bad:
        raise TorchModelError(f"metrics {bad}: give finite numbers under identifier names.")
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    with fs.local_output(folder, prefix="tfx-bridge-torch-model-") as local:
        torch.save(state, fs.join(local, WEIGHTS_FILE))
        fs.write_text(fs.join(local, SPEC_FILE), spec.to_json())
        if metrics:
            fs.write_text(fs.join(local, METRICS_FILE),
                          json.dumps({k: float(v) for k, v in metrics.items()}, sort_keys=True))


def read_metrics(folder: str) -> Dict[str, float]:
    path = fs.join(folder, METRICS_FILE)
    if not fs.isfile(path):
        return {}
    data = limits.read_json(path, TorchModelError, "Rewrite it with tfx_bridge.torch.model.save.")
    if not isinstance(data, dict) or not all(
            isinstance(v, (int, float)) and math.isfinite(v) for v in data.values()):
        raise TorchModelError(f"{path} must map metric names to finite numbers.")
    return {str(k): float(v) for k, v in data.items()}


def record_trained_on(folder: str, examples_uri: str, recipe: Optional[str] = None) -> None:
    """Records what the model in ``folder`` was trained on: the Examples artifact URI and
    a digest of the rest that shaped it (the trainer's recipe: code, settings, graph)."""
    fs.write_text(fs.join(folder, TRAINED_ON_FILE),
                  json.dumps({"examples": examples_uri, "recipe": recipe}))


def _trained_field(folder: str, key: str) -> Optional[str]:
    path = fs.join(folder, TRAINED_ON_FILE)
    if not fs.isfile(path):
        return None
    try:
        value = limits.read_json(path, TorchModelError, "").get(key)
    except (ValueError, AttributeError):  # unreadable: the trained-on record is unknown
        return None
    return value if isinstance(value, str) else None


def trained_on(folder: str) -> Optional[str]:
    """The Examples artifact URI the model in ``folder`` was trained on; None if unknown."""
    return _trained_field(folder, "examples")


def trained_recipe(folder: str) -> Optional[str]:
    """The recipe digest the model in ``folder`` was trained with; None if unknown."""
    return _trained_field(folder, "recipe")


def build_module(cls, kwargs: dict, what: str):
    """``cls(**kwargs)``, its parameters' bytes checked first (:mod:`tfx_bridge.limits`)
    by building it on torch's meta device, where sizes cost no memory: kwargs from
    a spec or the command line (``out_dim=1e13``) are refused, not allocated."""
    import itertools

    import torch

    try:
        with torch.device("meta"):
            probe = cls(**kwargs)
    except TypeError:
        raise
    except Exception:  # noqa: BLE001  (a module that cannot be built on meta: built below)
        probe = None
    if probe is not None:
        limits.check_parameter_bytes(
            sum(t.numel() * t.element_size()
                for t in itertools.chain(probe.parameters(), probe.buffers())), what)
        del probe
    return cls(**kwargs)


def import_module_class(name: str):
    """The ``torch.nn.Module`` subclass named ``pkg.module:ClassName``.

    Importing runs the module's import-time code (module classes are trusted,
    see README "Trust boundaries"), so what can be refused is refused first
    (:func:`tfx_bridge.torch.class_path.check_class_path`: the path's syntax,
    an allowed set when one is configured, and the name's binding in the
    module's source, read without running it). After the import the class is
    checked to be a Module subclass before anything calls it, so a name such as
    ``os:system`` is refused rather than run with the spec's kwargs.
    """
    import importlib

    import torch

    try:
        module_path, class_name = class_path.check_class_path(name)
    except class_path.ClassPathError as e:
        raise TorchModelError(str(e)) from e
    try:
        cls = getattr(importlib.import_module(module_path), class_name)
    except (ImportError, AttributeError) as e:
        raise TorchModelError(
            f"module class {name!r}: cannot import it ({e}). Install the package that "
            "defines it, or fix the path.") from e
    if name in class_path.BUILDERS:
        return _builder(cls, name)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TorchModelError(
            f"module class {name!r} is {type(cls).__name__} "
            f"{getattr(cls, '__qualname__', cls)!r}, not a torch.nn.Module subclass. Name "
            "the model's class, e.g. mypkg.models:CtrModel.")
    return cls


def load_state_dict(folder: str) -> Dict[str, Any]:
    """The tensors in ``folder``'s weights file (``weights_only``: no pickled code runs)."""
    import torch

    path = fs.join(folder, WEIGHTS_FILE)
    if not fs.isfile(path):
        raise TorchModelError(f"{path} does not exist (the model's state_dict).")
    with fs.local_copy(path, prefix="tfx-bridge-weights-") as local:
        fs.check_regular(local)  # torch.load would block on a FIFO
        try:
            state = torch.load(local, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many types for a corrupt or unsafe file
            raise TorchModelError(f"{path} is not a tensors-only state_dict ({e}).") from e
    if not isinstance(state, dict):
        raise TorchModelError(f"{path} holds a {type(state).__name__}, not a state_dict.")
    return state


def warm_start(model, folder: str) -> List[str]:
    """Loads ``folder``'s weights into ``model`` (a warm start from a served model).

    Every parameter and buffer must be there with the same shape: a mismatch
    names the parameter and both shapes. Returns the names loaded.
    """
    state = load_state_dict(folder)
    own = model.state_dict()
    problems = []
    for name, tensor in own.items():
        if name not in state:
            problems.append(f"{name!r} is missing from the base model")
        elif tuple(state[name].shape) != tuple(tensor.shape):
            problems.append(f"{name!r} has shape {tuple(state[name].shape)} in the base model, "
                            f"{tuple(tensor.shape)} in this one")
    extra = sorted(set(state) - set(own))
    if extra:
        problems.append(f"the base model has parameters this one lacks: {extra}")
    if problems:
        raise TorchModelError(
            f"Cannot warm-start from {folder}: " + "; ".join(problems)
            + ". Build the module with the base model's constructor kwargs, or train "
              "from scratch (no base_model).")
    model.load_state_dict(state)
    return sorted(own)


def _builder(fn, name: str):
    """A builder allowed by name (class_path.BUILDERS) as a constructor: weights are
    the state_dict's, so nothing is downloaded (weights=None, weights_backbone=None),
    and what it returns must be a Module."""
    import functools

    import torch

    @functools.wraps(fn)
    def build(**kwargs):
        given = sorted(k for k in ("weights", "weights_backbone") if kwargs.get(k) is not None)
        if given:
            raise TypeError(
                f"{name} takes its weights from the state_dict: drop {given} from the "
                "keyword arguments (they would download pretrained weights)")
        module = fn(**{**kwargs, "weights": None, "weights_backbone": None})
        if not isinstance(module, torch.nn.Module):
            raise TorchModelError(f"builder {name!r} returned {type(module).__name__}, "
                                  "not a torch.nn.Module.")
        return module

    return build
