"""Module rewrites: PyTorch-level rewrites in force while a module is exported
(modules swapped, switches set), each named in the import report by its kind.

Imported only when a torch module is exported (torch is the ``onnx`` extra).

- ``mha-fastpath-off``: ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention``
  in eval mode under no_grad run PyTorch's fused kernels
  (``aten::_transformer_encoder_layer_fwd``, ``aten::_native_multi_head_attention``),
  which have no ONNX form. Export runs with
  ``torch.backends.mha.set_fastpath_enabled(False)``: the same math, as the
  unfused ops the exporter knows.
- ``embedding-bag-dense``: ``nn.EmbeddingBag`` exports as an ONNX ``Loop`` over
  the bags, which onnx2tf cannot convert. Over fixed-width 2-D ids it is a
  gather and a reduction, so each one is swapped (for the export only, weights
  shared) for a module computing exactly that: ``sum`` (with
  ``per_sample_weights``), ``mean`` and ``max``, ``padding_idx`` left out of
  every reduction and an all-padding bag giving zeros, as PyTorch does.
  A bag called ragged (1-D ids + ``offsets``) runs as itself and is exported
  through fused.py's Loop-free ``embedding_bag`` form (not named here).
- ``model-onnx-export-path``: some models carry their own code path for ONNX
  export, switched by ``config.onnx_export`` (transformers' Longformer and LED:
  their default chunking uses ``as_strided`` with sizes the trace freezes, so
  the graph is only right at the export batch). When a module's code reads
  that switch, its config has it on during the export (and back off after:
  the checks compare against the model's default path).
- ``autograd-function-inlined``: a ``torch.autograd.Function`` without an ONNX
  ``symbolic`` (Reformer's reversible layers, custom kernels with a Python
  reference forward) is traced through its ``forward`` as plain code during
  the export. torch's own inlining of such Functions crashes on some
  (``_Map_base::at``); under no_grad in eval the backward never runs, so the
  ops ``forward`` records are the whole model. A Function with a ``symbolic``
  keeps it.
- ``unregistered-parameters-frozen``: parameters of modules kept in a plain list
  or dict (not registered, so not inputs of the traced graph) stop requiring grad
  during the export, which the tracer demands of a constant.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator, List, Tuple

import torch
from torch import nn

from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError

MHA_FASTPATH_OFF = "mha-fastpath-off"
EMBEDDING_BAG_DENSE = "embedding-bag-dense"
MODEL_ONNX_EXPORT_PATH = "model-onnx-export-path"
AUTOGRAD_FUNCTION_INLINED = "autograd-function-inlined"
UNREGISTERED_PARAMETERS_FROZEN = "unregistered-parameters-frozen"
# The config attribute transformers' models read to take their ONNX-export code path.
ONNX_EXPORT_SWITCH = "onnx_export"

# Module types (or TorchScript original names) whose eval fast path has no ONNX form.
_FASTPATH_MODULES = ("TransformerEncoderLayer", "TransformerEncoder", "MultiheadAttention")


def _type_name(module) -> str:
    return getattr(module, "original_name", None) or type(module).__name__


def uses_fastpath_modules(module) -> List[str]:
    """Qualified names of submodules that may take the fused attention fast path."""
    return [name or "(root)" for name, m in module.named_modules()
            if _type_name(m) in _FASTPATH_MODULES]


@contextlib.contextmanager
def mha_fastpath_off() -> Iterator[None]:
    """``torch.backends.mha.set_fastpath_enabled(False)`` for the block, then restored."""
    mha = torch.backends.mha
    before = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(before)


class DenseEmbeddingBag(nn.Module):
    """``nn.EmbeddingBag`` over fixed-width 2-D ids as gather + reduce (same weights)."""

    def __init__(self, bag: nn.EmbeddingBag, name: str):
        super().__init__()
        self.weight = bag.weight
        self.mode = bag.mode
        self.padding_idx = bag.padding_idx
        self.qualified_name = name
        object.__setattr__(self, "_original", bag)  # not a submodule: weights stay shared
        self.dense = self.ragged = False  # how export called it (the report names dense)

    def forward(self, input, offsets=None, per_sample_weights=None):  # noqa: A002 (torch's name)
        if input.dim() != 2 or offsets is not None:
            # Ragged bags (1-D ids + offsets): the bag itself, exported through
            # fused.py's Loop-free embedding_bag form (segment ids + scatter).
            self.ragged = True
            return self._original(input, offsets, per_sample_weights)
        self.dense = True
        vectors = nn.functional.embedding(input, self.weight)  # [N, L, D]
        keep = None
        if self.padding_idx is not None:
            keep = (input != self.padding_idx).unsqueeze(-1)  # [N, L, 1]
        if per_sample_weights is not None:
            if self.mode != "sum":
                raise ImporterConfigError(
                    f"EmbeddingBag {self.qualified_name!r}: per_sample_weights needs "
                    f"mode='sum' (it is {self.mode!r}); PyTorch refuses it too.")
            vectors = vectors * per_sample_weights.unsqueeze(-1).to(vectors.dtype)
        if self.mode == "max":
            if keep is None:
                return vectors.amax(dim=1)
            lowest = torch.finfo(vectors.dtype).min
            pooled = torch.where(keep, vectors, torch.full_like(vectors, lowest)).amax(dim=1)
            return torch.where(keep.any(dim=1), pooled, torch.zeros_like(pooled))
        if keep is not None:
            vectors = vectors * keep.to(vectors.dtype)
        total = vectors.sum(dim=1)
        if self.mode == "sum":
            return total
        if keep is None:
            return total / input.shape[1]
        count = keep.to(vectors.dtype).sum(dim=1).clamp(min=1.0)
        return total / count


WRAPPER_ATTRIBUTE = "model"


class Positional(nn.Module):
    """Calls the model with exactly the declared inputs, positionally.

    torch.onnx.export fills every omitted ``forward`` argument with its Python
    default and the tracer turns those into tensors (``is_causal=False`` becomes
    a tensor and ``nn.TransformerEncoderLayer`` fails); behind ``*args`` the
    defaults stay Python values, as in the research team's own calls.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        setattr(self, WRAPPER_ATTRIBUTE, model)
        # torch.onnx.export restores the root's mode recursively afterwards: a
        # wrapper in train mode would leave the model with dropout on.
        self.train(model.training)

    def forward(self, *args):
        return getattr(self, WRAPPER_ATTRIBUTE)(*args)


def _set_submodule(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, attr, new)


@contextlib.contextmanager
def dense_embedding_bags(module: nn.Module) -> Iterator[Tuple[nn.Module, list]]:
    """Swaps every ``nn.EmbeddingBag`` for a DenseEmbeddingBag for the block, then restores.

    Yields the module to export (the swap itself when the root is a bag) and
    the swaps (:func:`dense_names` tells which ones export used dense).
    TorchScript modules are left as they are (their code is compiled); fused.py
    exports their ``aten::embedding_bag`` without a Loop.
    """
    if isinstance(module, torch.jit.ScriptModule):
        yield module, []
        return
    bags: List[Tuple[str, nn.EmbeddingBag]] = [
        (name, m) for name, m in module.named_modules() if isinstance(m, nn.EmbeddingBag)]
    for name, bag in bags:
        label = name or "(root)"
        if bag.max_norm is not None:
            raise ImporterConfigError(
                f"EmbeddingBag {label!r} has max_norm={bag.max_norm}: it rewrites its weights "
                "at every lookup, which no served graph does. Renormalise the weights once "
                "(torch.renorm) and set max_norm=None before handing the model over.")
    if bags and not bags[0][0]:
        root = DenseEmbeddingBag(module, "(root)")
        yield root, [root]
        return
    swapped = [DenseEmbeddingBag(bag, name) for name, bag in bags]
    for (name, _), dense in zip(bags, swapped, strict=True):
        _set_submodule(module, name, dense)
    try:
        yield module, swapped
    finally:
        for name, bag in bags:
            _set_submodule(module, name, bag)


def dense_names(swapped: List[DenseEmbeddingBag]) -> List[str]:
    """The bags export called over fixed-width ids (swapped to gather + reduce)."""
    return [m.qualified_name for m in swapped if m.dense]


def _reads_export_switch(cls) -> bool:
    """Whether the source of the module defining ``cls`` reads ``config.onnx_export``."""
    import inspect

    defined_in = sys.modules.get(cls.__module__)
    try:
        text = inspect.getsource(defined_in) if defined_in is not None else ""
    except (OSError, TypeError):  # built-in, compiled or without source
        return False
    return f"config.{ONNX_EXPORT_SWITCH}" in text or f'"{ONNX_EXPORT_SWITCH}"' in text


@contextlib.contextmanager
def model_export_paths(module: nn.Module) -> Iterator[List[str]]:
    """``config.onnx_export = True`` for the block on the configs of submodules whose
    code reads it; yields the names of those submodules (empty: nothing changed).
    Each config is restored afterwards (the attribute removed if it was absent)."""
    if isinstance(module, torch.jit.ScriptModule):
        yield []  # a compiled graph: its code paths are fixed
        return
    readers = {}
    for cls in {type(m) for m in module.modules()}:
        readers[cls] = _reads_export_switch(cls)
    configs, names = {}, []
    for name, m in module.named_modules():
        config = getattr(m, "config", None)
        if config is None or not readers[type(m)] or isinstance(config, (dict, str)):
            continue
        names.append(name or type(m).__name__)
        configs.setdefault(id(config), (config, getattr(config, ONNX_EXPORT_SWITCH,
                                                        _ABSENT)))
    try:
        for config, _ in configs.values():
            setattr(config, ONNX_EXPORT_SWITCH, True)
        yield names
    finally:
        for config, before in configs.values():
            if before is _ABSENT:
                delattr(config, ONNX_EXPORT_SWITCH)
            else:
                setattr(config, ONNX_EXPORT_SWITCH, before)


_ABSENT = object()


class _ExportContext:
    """What a Function's forward may call on ``ctx``; nothing is kept for a backward."""

    needs_input_grad: tuple = ()
    saved_tensors: tuple = ()

    def save_for_backward(self, *tensors) -> None:
        self.saved_tensors = tensors

    def mark_dirty(self, *tensors) -> None:
        pass

    def mark_non_differentiable(self, *tensors) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass


@contextlib.contextmanager
def autograd_functions_inlined() -> Iterator[List[str]]:
    """Calls each symbolic-less ``autograd.Function`` as its ``forward`` for the block.

    Yields the list the block fills with the Function classes it inlined
    (process-wide while it runs: one export at a time).
    """
    function = torch.autograd.Function
    original = function.__dict__["apply"]
    base_setup = torch.autograd.function._SingleLevelFunction.setup_context
    inlined: List[str] = []

    def apply(cls, *args, **kwargs):
        if getattr(cls, "symbolic", None) is not None or torch.is_grad_enabled():
            return original.__func__(cls, *args, **kwargs)
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name not in inlined:
            inlined.append(name)
        if getattr(cls, "setup_context", base_setup) is not base_setup:
            return cls.forward(*args, **kwargs)  # the ctx-free forward + setup_context style
        return cls.forward(_ExportContext(), *args, **kwargs)

    function.apply = classmethod(apply)
    try:
        yield inlined
    finally:
        function.apply = original


# nn.Module's own bookkeeping: what it registered, walked through its accessors instead.
_REGISTRY = ("_parameters", "_buffers", "_modules")


def _unregistered_parameters(module: nn.Module) -> List[Tuple[str, nn.Parameter]]:
    """Parameters that require grad and that ``module.parameters()`` does not list:
    those of modules kept in a plain list, tuple or dict attribute (not an
    nn.ModuleList), by attribute path."""
    registered = {id(p) for p in module.parameters()}
    found: List[Tuple[str, nn.Parameter]] = []
    seen = set()

    def walk(value, path: str, depth: int) -> None:
        if id(value) in seen or depth > 4:
            return
        seen.add(id(value))
        if isinstance(value, nn.Parameter):
            pairs = [("", value)]
        elif isinstance(value, nn.Module):
            pairs = [(f".{n}", p) for n, p in value.named_parameters()]
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]", depth + 1)
            return
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}[{key!r}]", depth + 1)
            return
        else:
            return
        for name, p in pairs:
            if p.requires_grad and id(p) not in registered:
                registered.add(id(p))
                found.append((path + name, p))

    for name, sub in module.named_modules():
        for key, value in vars(sub).items():
            if key not in _REGISTRY:
                walk(value, f"{name}.{key}" if name else key, 0)
    return found


@contextlib.contextmanager
def unregistered_parameters_frozen(module) -> Iterator[List[str]]:
    """Parameters of modules held outside the module tree, as constants for the block.

    torch's tracer records a registered parameter as an input of the graph and any
    other tensor it meets as a constant, and refuses a constant that requires grad
    ("Cannot insert a Tensor that requires grad as a constant"): a model that keeps
    convolutions in a plain Python list cannot be exported as it is. Inference needs
    no grad, so those parameters stop requiring it during the export (and require it
    again after). Yields their attribute paths."""
    found = _unregistered_parameters(module) if isinstance(module, nn.Module) \
        and not isinstance(module, torch.jit.ScriptModule) else []
    for _, p in found:
        p.requires_grad_(False)
    try:
        yield [name for name, _ in found]
    finally:
        for _, p in found:
            p.requires_grad_(True)


def frozen_rewrites(frozen: List[str]) -> list:
    """The import report's entry for :func:`unregistered_parameters_frozen` ([] for none)."""
    from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite

    if not frozen:
        return []
    return [Rewrite(UNREGISTERED_PARAMETERS_FROZEN, frozen[:20],
                    f"{len(frozen)} parameter(s) of modules kept outside the module tree "
                    "(a plain list or dict, not nn.ModuleList) exported as constants: the "
                    "tracer refuses a constant that requires grad, and inference needs none")]


def rewrites(fastpath: List[str], inlined: List[str], export_paths: List[str],
             bags: List[str]) -> list:
    """The import report's entries for the module rewrites one export used, from what
    :func:`uses_fastpath_modules`, :func:`autograd_functions_inlined`,
    :func:`model_export_paths` and :func:`dense_names` found ([] for none)."""
    from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite

    found = [
        (MHA_FASTPATH_OFF, fastpath,
         "exported with torch.backends.mha.set_fastpath_enabled(False): the fused "
         "attention kernels have no ONNX form; the unfused ops compute the same"),
        (AUTOGRAD_FUNCTION_INLINED, inlined,
         "torch.autograd.Function(s) without an ONNX symbolic, traced through their "
         "forward (no backward runs in an eval export)"),
        (MODEL_ONNX_EXPORT_PATH, export_paths,
         f"exported with config.{ONNX_EXPORT_SWITCH}=True: these modules' code has "
         "its own path for ONNX export (their default one freezes sizes of the export "
         "sample); checked against the default path"),
        (EMBEDDING_BAG_DENSE, bags,
         "nn.EmbeddingBag over fixed-width ids exported as gather + reduce (its ONNX "
         "form is a Loop); same weights, padding_idx left out"),
    ]
    return [Rewrite(kind, nodes, why) for kind, nodes, why in found if nodes]
