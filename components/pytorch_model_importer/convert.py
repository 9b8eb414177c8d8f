"""PyTorch -> ONNX -> TF SavedModel with a named signature, and proof of equivalence.

The core of PyTorchModelImporter and ``tfx-bridge import-model``: no TFX
imports; torch, onnx and onnxruntime are imported lazily (the ``onnx`` extra).

Steps:
1. Load the source: a TorchScript file, a state_dict + ``pkg.mod:Class`` (loaded
   with ``torch.load(weights_only=True)``: no arbitrary unpickling), or ONNX.
2. Export (torch sources): ``torch.onnx.export`` (TorchScript exporter, opset
   17 by default), a dynamic axis for every -1, then ``onnx.checker`` and shape
   inference. ONNX external data must stay inside the model's folder.
3. Convert: onnx2tf 1.24.1 in a subprocess on a private copy (it rewrites its
   input in place, writes TFLite files and sets process-wide globals), with
   every rank >= 3 input kept in its declared layout (no silent NCHW -> NHWC).
   Only the SavedModel is kept.
4. Wrap: ``serving_default`` takes exactly the declared input names, dtypes and
   shapes and returns the declared output names (onnx2tf loses them);
   ``serving_tf_example`` takes serialized tf.Examples (string [None]), parses
   int64/float32 from the wire and casts to the declared dtypes, so TFX
   Evaluator and InfraValidator, which need one DT_STRING input, work.
5. Verify: torch (for torch sources), onnxruntime and the saved SavedModel on
   the same inputs at batch sizes 1, 7 and 32; per output max abs / rel error;
   integer outputs must match exactly. The tf.Example signature is checked
   against ``serving_default`` too. A report (JSON + Markdown) is written.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from tfx_bridge import compare, examples, fs, layout, savedmodel, torch_model
from tfx_bridge.components.pytorch_model_importer import rewrite, transform_wrap
from tfx_bridge.components.pytorch_model_importer.errors import (
    ConversionError,
    ImporterConfigError,
    ImporterError,
    ModelSourceError,
    missing_extra,
)
from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec, make_inputs
from tfx_bridge.errors import short_message
from tfx_bridge.savedmodel import EXAMPLE_SIGNATURE, SERVING_SIGNATURE

SERVING_DIR = savedmodel.SERVING_DIR
REPORT_JSON = layout.REPORT_JSON
REPORT_MD = layout.REPORT_MD
EXAMPLE_INPUT = "examples"
DEFAULT_OPSET = 17
MIN_OPSET = 14
DEFAULT_ATOL = 1e-4
DEFAULT_BATCH_SIZES = (1, 7, 32)
SOURCE_TORCHSCRIPT = "torchscript"
SOURCE_STATE_DICT = "state_dict"
SOURCE_ONNX = "onnx"
SOURCES = (SOURCE_TORCHSCRIPT, SOURCE_STATE_DICT, SOURCE_ONNX)
CONVERT_TIMEOUT_S = 1800


def _torch():
    try:
        import torch
    except ImportError as e:
        raise missing_extra("torch", e) from e
    return torch


def _onnx():
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
        if self.kind != SOURCE_STATE_DICT and self.module_class:
            raise ImporterConfigError(
                f"--module-class is only for state_dict sources, not {self.kind}.")
        if fs.isdir(self.path):
            raise ModelSourceError(
                f"{self.path} is a folder; give the model file inside it (e.g. "
                f"{fs.join(self.path, 'model.pt')}).")
        if not fs.isfile(self.path):
            raise ModelSourceError(f"Model file {self.path} does not exist.")


# --------------------------------------------------------------------------- load


def load_torch_module(source: ModelSource):
    """The torch module of a TorchScript or state_dict source, in eval mode."""
    torch = _torch()
    if source.kind == SOURCE_TORCHSCRIPT:
        try:
            return torch.jit.load(source.path, map_location="cpu").eval()
        except Exception as e:
            raise ModelSourceError(
                f"{source.path}: not a TorchScript file ({type(e).__name__}: {e}). Save it with "
                "torch.jit.script(model).save(path) or torch.jit.trace, or give --state-dict "
                "with --module-class.") from e
    try:
        cls = torch_model.import_module_class(source.module_class)
    except torch_model.TorchModelError as e:
        raise ImporterConfigError(f"--module-class: {e}") from e
    try:
        module = cls(**(source.module_kwargs or {}))
    except TypeError as e:
        raise ImporterConfigError(
            f"{source.module_class}(**{source.module_kwargs}) failed: {e}. Fix "
            "--module-kwargs.") from e
    try:
        state = torch.load(source.path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ModelSourceError(
            f"{source.path}: not a plain state_dict ({type(e).__name__}: "
            f"{str(e).splitlines()[0]}). Only tensors are loaded (weights_only=True), never "
            "pickled code: save with torch.save(model.state_dict(), path).") from e
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
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
    onnx = _onnx()
    model = onnx.load(onnx_path, load_external_data=False)
    folder = os.path.realpath(os.path.dirname(os.path.abspath(onnx_path)))
    bad = []
    for tensor in _all_tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        resolved = os.path.realpath(os.path.join(folder, location))
        if os.path.isabs(location) or not resolved.startswith(folder + os.sep):
            bad.append(f"{tensor.name!r} -> {location!r}")
    if bad:
        raise ModelSourceError(
            f"{onnx_path}: external data outside the model's folder ({', '.join(bad)}). "
            "Keep weight files next to the .onnx (relative locations) and re-export.")


# --------------------------------------------------------------------------- inputs


# --------------------------------------------------------------------------- export


def export_onnx(module, inputs: Sequence[TensorSpec], output_names: Sequence[str], path: str,
                opset: int = DEFAULT_OPSET) -> List[Rewrite]:
    """torch.onnx.export with named inputs/outputs and a dynamic axis per -1.

    The fused attention fast path is off during export and fixed-width
    EmbeddingBags are exported as gather + reduce (swaps.py); the changes made
    are returned for the report.
    """
    torch = _torch()
    onnx = _onnx()
    from tfx_bridge.components.pytorch_model_importer import swaps

    if not MIN_OPSET <= opset <= 20:
        raise ImporterConfigError(f"opset {opset}: use {MIN_OPSET} to 20 (default 17).")
    sample = make_inputs(inputs, batch=2)
    args = tuple(torch.from_numpy(sample[s.name]) for s in inputs)
    dynamic = {s.name: {i: ("batch" if i == 0 else f"{s.name}_dim{i}")
                        for i, d in enumerate(s.shape) if d < 0} for s in inputs}
    for name in output_names:
        dynamic[name] = {0: "batch"}
    fastpath = swaps.uses_fastpath_modules(module)
    try:
        with swaps.mha_fastpath_off(), swaps.dense_embedding_bags(module) as (exported, bags), \
                torch.no_grad():
            if not isinstance(exported, torch.jit.ScriptModule):
                exported = swaps.Positional(exported)
            torch.onnx.export(exported, args, path, input_names=[s.name for s in inputs],
                              output_names=list(output_names), dynamic_axes=dynamic,
                              opset_version=opset, do_constant_folding=True, dynamo=False)
    except ImporterError:
        raise
    except Exception as e:
        raise ModelSourceError(_export_failure(e, inputs)) from e
    model = onnx.load(path)
    if len(model.graph.output) != len(output_names):
        raise ImporterConfigError(
            f"The model returns {len(model.graph.output)} output(s) but "
            f"{len(output_names)} --output-name were given ({list(output_names)}).")
    onnx.checker.check_model(model)
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    applied = []
    if fastpath:
        applied.append(Rewrite(
            swaps.MHA_FASTPATH_OFF, fastpath,
            "exported with torch.backends.mha.set_fastpath_enabled(False): the fused "
            "attention kernels have no ONNX form; the unfused ops compute the same"))
    if bags:
        applied.append(Rewrite(
            swaps.EMBEDDING_BAG_DENSE, bags,
            "nn.EmbeddingBag over fixed-width ids exported as gather + reduce (its ONNX "
            "form is a Loop onnx2tf cannot convert); same weights, padding_idx left out"))
    return applied


def export_prefix(module) -> str:
    """The scope prefix export_onnx's wrapper adds to node names ('' for TorchScript)."""
    if module is None or isinstance(module, _torch().jit.ScriptModule):
        return ""
    from tfx_bridge.components.pytorch_model_importer import swaps

    return swaps.WRAPPER_ATTRIBUTE + "."


_FUSED_OPS = ("_transformer_encoder_layer_fwd", "_native_multi_head_attention")


def _export_failure(error: Exception, inputs: Sequence[TensorSpec]) -> str:
    """What torch.onnx.export's error means for the user, and the fix."""
    text = str(error)
    first = next((ln for ln in text.splitlines() if ln.strip()), type(error).__name__)
    fused = next((op for op in _FUSED_OPS if op in text), None)
    if fused:
        return (f"torch.onnx.export met PyTorch's fused attention kernel aten::{fused}, which "
                "has no ONNX form. The importer turns the fast path off while exporting, so "
                "this TorchScript file was traced with it on: re-trace with "
                "torch.backends.mha.set_fastpath_enabled(False) (or in train mode), or hand "
                "over the state_dict with --module-class.")
    if "embedding_bag" in text:
        return (f"torch.onnx.export cannot export this compiled nn.EmbeddingBag ({first[:200]})."
                " Hand over the state_dict with --module-class: the importer then exports "
                "fixed-width bags as gather + reduce (padding_idx included).")
    return (f"torch.onnx.export failed: {type(error).__name__}: {first[:500]}. Check the "
            f"declared inputs ({', '.join(s.to_text() for s in inputs)}) match forward()'s "
            "arguments in order, and write data-dependent control flow densely (e.g. top-k "
            "gates as topk + gather).")


def rename_onnx_io(src: str, dst: str, inputs: Sequence[TensorSpec],
                   output_names: Sequence[str]) -> None:
    """A copy of an ONNX file whose outputs carry the declared names (inputs must match)."""
    onnx = _onnx()
    check_external_data(src)
    model = onnx.load(src)
    graph_inputs = [i.name for i in model.graph.input
                    if i.name not in {t.name for t in model.graph.initializer}]
    declared = [s.name for s in inputs]
    if graph_inputs != declared:
        raise ImporterConfigError(
            f"{src}: graph inputs are {graph_inputs}; declared inputs are {declared}. Declare "
            "them with the graph's names, in order.")
    if len(model.graph.output) != len(output_names):
        raise ImporterConfigError(
            f"{src} has {len(model.graph.output)} outputs "
            f"({[o.name for o in model.graph.output]}); {len(output_names)} --output-name given.")
    rename = {o.name: new for o, new in zip(model.graph.output, output_names, strict=True)}
    for node in model.graph.node:
        for i, name in enumerate(node.output):
            if name in rename:
                node.output[i] = rename[name]
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
    for o in model.graph.output:
        o.name = rename[o.name]
    onnx.checker.check_model(model)
    onnx.save(model, dst)


# --------------------------------------------------------------------------- convert

# onnx2tf runs in a child process (onnx2tf_runner.py): it sets process-wide globals.
ONNX2TF_MODULE = "tfx_bridge.components.pytorch_model_importer.onnx2tf_runner"
_FAILED_OP = re.compile(r"onnx_op_type:\s*(\S+)\s+onnx_op_name:\s*(\S+)")


def convert_onnx_to_tf(onnx_path: str, workdir: str, inputs: Sequence[TensorSpec],
                       types: Optional[Dict[str, str]] = None) -> str:
    """onnx2tf in a subprocess on a private copy; returns the SavedModel folder.

    ``types`` (qualified module name -> class) lets a failure name the PyTorch
    module a node came from.
    """
    try:
        import onnx2tf  # noqa: F401  (present? the subprocess imports it for real)
    except ImportError as e:
        raise missing_extra("onnx2tf", e) from e
    private = os.path.join(workdir, "model_for_onnx2tf.onnx")
    shutil.copyfile(onnx_path, private)
    out = os.path.join(workdir, "onnx2tf_out")
    keep = ",".join(s.name for s in inputs if len(s.shape) >= 3)
    env = dict(os.environ)
    # onnx2tf shells out to the onnxsim CLI, which lives beside this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    proc = subprocess.run([sys.executable, "-m", ONNX2TF_MODULE, private, out, keep],
                          capture_output=True, text=True, env=env, cwd=workdir,
                          timeout=CONVERT_TIMEOUT_S)
    if proc.returncode != 0 or not os.path.exists(os.path.join(out, "saved_model.pb")):
        text = proc.stdout + "\n" + proc.stderr
        m = _FAILED_OP.search(text)
        last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
        if m:
            node = rewrite.describe_node(m.group(1), m.group(2), types or {})
            raise ConversionError(
                f"onnx2tf cannot convert {node}: {last[0]}. Rewrite that part of the PyTorch "
                "model with supported ops (e.g. dense topk + gather instead of nonzero/index "
                "routing) and re-export.")
        raise ConversionError(f"onnx2tf failed (exit {proc.returncode}): {last[0]}")
    return out


def _output_order(keys: Sequence[str], output_names: Sequence[str]) -> List[str]:
    """onnx2tf's output keys in the model's output order."""
    if set(keys) == set(output_names):
        return list(output_names)
    numbered = sorted(keys, key=lambda k: int(re.findall(r"\d+", k)[-1])
                      if re.findall(r"\d+", k) else -1)
    if len(numbered) != len(output_names):
        raise ConversionError(
            f"The converted model has outputs {sorted(keys)}; expected {len(output_names)} "
            f"({list(output_names)}).")
    return numbered


def wrap_saved_model(converted_dir: str, out_dir: str, inputs: Sequence[TensorSpec],
                     output_names: Sequence[str], schema=None) -> None:
    """Saves the declared ``serving_default`` and the tf.Example signature."""
    import tensorflow as tf

    if schema is not None:
        check_inputs_against_schema(inputs, schema)
    loaded = tf.saved_model.load(converted_dir)
    fn = loaded.signatures[SERVING_SIGNATURE]
    converted_inputs = fn.structured_input_signature[1]
    by_name = {}
    for spec in inputs:
        candidates = [spec.name, re.sub(r"[^A-Za-z0-9_]", "_", spec.name)]
        found = next((c for c in candidates if c in converted_inputs), None)
        if found is None:
            raise ConversionError(
                f"The converted model has inputs {sorted(converted_inputs)}; no match for "
                f"{spec.name!r}.")
        by_name[spec.name] = found
    order = _output_order(list(fn.structured_outputs), output_names)

    module = tf.Module()
    module.converted = loaded
    specs = [tf.TensorSpec([None if d < 0 else d for d in s.shape], tf.as_dtype(s.dtype),
                           name=s.name) for s in inputs]

    @tf.function(input_signature=specs)
    def serve(*args):
        feed = {by_name[s.name]: tf.cast(a, converted_inputs[by_name[s.name]].dtype)
                for s, a in zip(inputs, args, strict=True)}
        out = fn(**feed)
        return {name: tf.identity(out[key], name=name)
                for name, key in zip(output_names, order, strict=True)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLE_INPUT)])
    def serve_examples(serialized):
        parsed = examples.parse_examples(serialized, inputs, ImporterConfigError)
        return serve(*[parsed[s.name] for s in inputs])

    module.serve = serve
    module.serve_examples = serve_examples
    tf.saved_model.save(module, out_dir, signatures={
        SERVING_SIGNATURE: serve.get_concrete_function(),
        EXAMPLE_SIGNATURE: serve_examples.get_concrete_function()})


def check_inputs_against_schema(inputs: Sequence[TensorSpec], schema) -> None:
    """Every input must be a schema feature whose type the declared dtype can take."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    types = {f.name: schema_pb2.FeatureType.Name(f.type) for f in schema.feature}
    problems = []
    for s in inputs:
        want = "FLOAT" if s.dtype.startswith("float") else "INT"
        if s.name not in types:
            problems.append(f"input {s.name!r} is not a schema feature")
        elif types[s.name] != want:
            problems.append(f"input {s.name!r} is {s.dtype} but the schema says {types[s.name]}")
    if problems:
        raise ImporterConfigError(
            "The tf.Example signature cannot parse with the schema: " + "; ".join(problems)
            + ". Name inputs after features and match their types.")


# --------------------------------------------------------------------------- verify


@dataclasses.dataclass
class OutputCheck:
    """One comparison; ``error`` (and None for the numbers) when a side raised instead."""

    batch: int
    output: str
    reference: str
    dtype: str
    max_abs: Optional[float]
    max_rel: Optional[float]
    mismatches: Optional[int]
    ok: bool
    error: Optional[str] = None


def _flatten_outputs(out) -> List:
    """A model's outputs as a flat list (tuples/lists nested as nn.LSTM returns them)."""
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in _flatten_outputs(item)]
    return [out]


def run_torch(module, feeds: Dict[str, np.ndarray], inputs: Sequence[TensorSpec]
              ) -> List[np.ndarray]:
    torch = _torch()
    with torch.no_grad():
        out = module(*[torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in inputs])
    return [o.detach().cpu().numpy() for o in _flatten_outputs(out)]


def run_ort(onnx_path: str, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise missing_extra("onnxruntime", e) from e
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _failed(batch: int, names: Sequence[str], reference: str, dtypes: Sequence[str],
            error: Exception) -> List[OutputCheck]:
    message = short_message(error)
    return [OutputCheck(batch, name, reference, dtype, None, None, None, False, message)
            for name, dtype in zip(names, dtypes, strict=True)]


def verify(saved_model_dir: str, onnx_path: str, inputs: Sequence[TensorSpec],
           output_names: Sequence[str], torch_module=None, atol: float = DEFAULT_ATOL,
           rtol: float = 0.0, batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
           real_inputs: Optional[Dict[str, np.ndarray]] = None) -> List[OutputCheck]:
    """TF vs torch (when given) and vs onnxruntime, per batch size and output.

    Never raises for a model that fails: a side that raises at a batch size is
    a failed check carrying the error (the SavedModel is then not equivalent).
    """
    import tensorflow as tf

    loaded = tf.saved_model.load(saved_model_dir)
    serve = loaded.signatures[SERVING_SIGNATURE]
    serve_examples = loaded.signatures[EXAMPLE_SIGNATURE]
    unknown = ["unknown"] * len(output_names)
    checks: List[OutputCheck] = []
    for batch in batch_sizes:
        feeds = make_inputs(inputs, batch)
        if real_inputs is not None:
            feeds = examples.tile_rows(real_inputs, batch) or feeds
        refs = []
        runners = [("onnxruntime", lambda f=feeds: run_ort(onnx_path, f))]
        if torch_module is not None:
            runners.insert(0, ("torch", lambda f=feeds: run_torch(torch_module, f, inputs)))
        for ref_name, run in runners:
            try:
                refs.append((ref_name, [np.asarray(r) for r in run()]))
            except Exception as e:  # the reference itself cannot run this batch
                checks.extend(_failed(batch, output_names, ref_name, unknown, e))
        dtypes = [str(r.dtype) for r in refs[0][1]] if refs else unknown
        try:
            out = serve(**{k: tf.constant(v) for k, v in feeds.items()})
            got = [out[name].numpy() for name in output_names]
        except Exception as e:  # a SavedModel that crashes at this batch size
            for ref_name, _ in refs:
                checks.extend(_failed(batch, output_names, ref_name, dtypes, e))
            continue
        for ref_name, ref_out in refs:
            if len(ref_out) != len(output_names):
                checks.extend(_failed(batch, output_names, ref_name, dtypes, ValueError(
                    f"{ref_name} returned {len(ref_out)} outputs, {len(output_names)} declared")))
                continue
            for name, r, g in zip(output_names, ref_out, got, strict=True):
                c = compare.compare(r, g, atol, rtol)
                checks.append(OutputCheck(batch, name, ref_name, str(r.dtype),
                                          c.max_abs, c.max_rel, c.mismatches, c.ok))
        if batch == batch_sizes[min(1, len(batch_sizes) - 1)]:
            via_name = SERVING_SIGNATURE + " via tf.Example"
            try:
                serialized = examples_from_feeds(feeds, inputs)
                via = serve_examples(**{EXAMPLE_INPUT: tf.constant(serialized)})
                via = [via[name].numpy() for name in output_names]
            except Exception as e:
                checks.extend(_failed(batch, output_names, via_name,
                                      [str(g.dtype) for g in got], e))
                continue
            for name, g, v in zip(output_names, got, via, strict=True):
                c = compare.compare(g, v, atol, rtol)
                checks.append(OutputCheck(batch, name, via_name, str(g.dtype), c.max_abs,
                                          c.max_rel, c.mismatches, c.ok))
    return checks


def max_float_error(checks: Sequence[OutputCheck]) -> Optional[float]:
    """The largest measured error over float outputs; None when none was measured."""
    measured = [c.max_abs for c in checks if c.max_abs is not None
                and not c.dtype.startswith(("int", "uint", "bool", "unknown"))]
    return max(measured) if measured else None


def examples_from_feeds(feeds: Dict[str, np.ndarray], inputs: Sequence[TensorSpec]
                        ) -> List[bytes]:
    """Serialized tf.Examples carrying the feeds (ints as int64_list, floats float_list)."""
    import tensorflow as tf

    n = len(next(iter(feeds.values())))
    out = []
    for i in range(n):
        ex = tf.train.Example()
        for s in inputs:
            values = np.asarray(feeds[s.name][i]).reshape(-1)
            f = ex.features.feature[s.name]
            if s.dtype.startswith("float"):
                f.float_list.value.extend(values.astype(np.float32).tolist())
            else:
                f.int64_list.value.extend(values.astype(np.int64).tolist())
        out.append(ex.SerializeToString())
    return out


# --------------------------------------------------------------------------- import


@dataclasses.dataclass
class ImportResult:
    blessed: bool
    report: dict
    serving_dir: str


def import_model(source: ModelSource, inputs: Sequence[TensorSpec],
                 output_names: Sequence[str], output_dir: str, opset: int = DEFAULT_OPSET,
                 atol: float = DEFAULT_ATOL, rtol: float = 0.0,
                 batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
                 examples_dir: Optional[str] = None, schema=None,
                 tamper_onnx=None, graph_rewrites: bool = True,
                 transform_dir: Optional[str] = None,
                 transformed_examples_dir: Optional[str] = None) -> ImportResult:
    """Imports ``source`` into ``output_dir``; either may be a URI.

    With ``transform_dir`` (a TFX TransformGraph), the SavedModel serves raw
    features through the Transform graph (see :mod:`.transform_wrap`): the
    model's inputs are transformed features; ``examples_dir`` then holds the
    raw Examples and ``transformed_examples_dir`` Transform's materialised
    ones, for the skew check across the chain.

    torch, onnx and onnx2tf read and write local files only: a remote source
    is copied to a local folder first (an ONNX file with the folder beside it,
    for its external data), the output is written locally and uploaded when
    every step has finished, and both copies are removed.
    """
    remote_onnx = source.kind == SOURCE_ONNX and fs.is_remote(source.path)
    source_root = fs.dirname(source.path) if remote_onnx else source.path
    with contextlib.ExitStack() as stack:
        local_root = stack.enter_context(fs.local_copy(source_root))
        local_out = stack.enter_context(fs.local_output(output_dir))
        transform = (stack.enter_context(fs.local_copy(transform_dir, "tfx-bridge-tft-"))
                     if transform_dir else None)
        local_path = (os.path.join(local_root, fs.basename(source.path)) if remote_onnx
                      else local_root)
        local = dataclasses.replace(source, path=local_path)
        result = _import_local(local, inputs, output_names, local_out, opset, atol, rtol,
                               batch_sizes, examples_dir, schema, tamper_onnx, graph_rewrites,
                               shown_source=source.path, transform_dir=transform,
                               transformed_examples_dir=transformed_examples_dir,
                               shown_transform=transform_dir)
    if fs.is_remote(output_dir):
        result.serving_dir = fs.join(output_dir, SERVING_DIR)
    return result


def _import_local(source: ModelSource, inputs: Sequence[TensorSpec],
                  output_names: Sequence[str], output_dir: str, opset: int,
                  atol: float, rtol: float, batch_sizes: Sequence[int],
                  examples_dir: Optional[str], schema, tamper_onnx, graph_rewrites: bool,
                  shown_source: str, transform_dir: Optional[str] = None,
                  transformed_examples_dir: Optional[str] = None,
                  shown_transform: Optional[str] = None) -> ImportResult:
    """Runs every step into ``output_dir`` (the Model artifact layout).

    ``graph_rewrites=False`` converts the exported ONNX as onnx2tf takes it (no
    rewrite.py changes; PyTorch-level swaps still apply), to measure what the
    rewrites buy. ``tamper_onnx`` (tests only) edits the ONNX given to onnx2tf,
    to prove the equivalence gate catches a broken conversion.
    """
    start = time.perf_counter()
    serving_dir = os.path.join(output_dir, SERVING_DIR)
    if transform_dir:  # a name mismatch is refused before the minutes of conversion
        transform_wrap.check_model_inputs(inputs, transform_wrap.transformed_spec(transform_dir))
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-import-") as work:
        onnx_path = os.path.join(work, "model.onnx")
        module = None
        if source.kind == SOURCE_ONNX:
            rename_onnx_io(source.path, onnx_path, inputs, output_names)
            rewrites = []
        else:
            module = load_torch_module(source)
            rewrites = export_onnx(module, inputs, output_names, onnx_path, opset)
        types = rewrite.module_types(module, prefix=export_prefix(module))
        # onnx2tf gets a rewritten copy; the reference (onnxruntime) runs the ONNX as exported.
        to_convert = os.path.join(work, "model_rewritten.onnx")
        shutil.copyfile(onnx_path, to_convert)
        if graph_rewrites:
            rewrites += rewrite.fix_dynamic_reshapes(to_convert, inputs)
        if tamper_onnx is not None:
            tamper_onnx(to_convert)
        problems = rewrite.unconvertible_nodes(to_convert, types)
        if problems:
            raise ConversionError(
                "onnx2tf cannot convert this model; nothing was written. "
                + "; ".join(problems) + ".")
        exported = time.perf_counter()
        converted = convert_onnx_to_tf(to_convert, work, inputs, types)
        if os.path.exists(serving_dir):
            shutil.rmtree(serving_dir)
        os.makedirs(output_dir, exist_ok=True)
        # With Transform, the converted model is wrapped twice: model inputs -> outputs
        # (checked against torch and onnxruntime), then raw features -> that model.
        model_dir = os.path.join(work, "model-inputs") if transform_dir else serving_dir
        wrap_saved_model(converted, model_dir, inputs, output_names,
                         None if transform_dir else schema)
        raw_inputs = None
        if transform_dir:
            raw_inputs = transform_wrap.wrap(model_dir, serving_dir, transform_dir, inputs,
                                             output_names)
        converted_at = time.perf_counter()
        feeds_from = transformed_examples_dir if transform_dir else examples_dir
        if transform_dir and not transformed_examples_dir:
            feeds_from = None
        real = (examples.inputs_from_examples(feeds_from, inputs, max(batch_sizes),
                                              ImporterConfigError)
                if feeds_from else None)
        checks = verify(model_dir, onnx_path, inputs, output_names, module, atol, rtol,
                        batch_sizes, real)
        chain = None
        if transform_dir and examples_dir and transformed_examples_dir:
            def reference(feeds):
                if module is not None:
                    return run_torch(module, feeds, inputs)
                return run_ort(onnx_path, feeds)

            chain_checks, chain = transform_wrap.verify_chain(
                serving_dir, transform_dir, examples_dir, transformed_examples_dir, inputs,
                output_names, reference, raw_inputs, atol, rtol, batch_sizes,
                lambda *row: OutputCheck(*row))
            checks += chain_checks
        verified = time.perf_counter()
    blessed = all(c.ok for c in checks)
    worst = max_float_error(checks)
    report = {
        "blessed": blessed,
        "source": {"kind": source.kind,
                   "path": shown_source if fs.is_remote(shown_source)
                   else os.path.abspath(shown_source),
                   "module_class": source.module_class},
        "opset": opset if source.kind != SOURCE_ONNX else None,
        # serving_default's inputs (raw features when a Transform graph is served).
        "inputs": ([r.to_text() for r in raw_inputs] if raw_inputs is not None
                   else [s.to_text() for s in inputs]),
        "model_inputs": [s.to_text() for s in inputs],
        "outputs": list(output_names),
        "transform": None if not transform_dir else {
            "graph": shown_transform,
            "raw_inputs": [r.to_text() for r in raw_inputs],
            # PyTorch on Transform's materialised eval features vs the SavedModel on the
            # same records raw: the training/serving skew check (None: not run).
            "skew_check": chain},
        "signatures": {
            SERVING_SIGNATURE: ("raw features -> Transform -> model -> named outputs"
                                if transform_dir else "declared inputs -> named outputs"),
            EXAMPLE_SIGNATURE: f"{EXAMPLE_INPUT}: string [None] (serialized "
                               f"{'raw ' if transform_dir else ''}tf.Example)"},
        "tolerance": {"atol": atol, "rtol": rtol, "integer_outputs": "exact"},
        "inputs_from": "examples" if feeds_from and real is not None else "random",
        "max_abs_error": worst,
        "rewrites": [r.to_json() for r in rewrites],
        "seconds": {"export": round(exported - start, 2),
                    "convert": round(converted_at - exported, 2),
                    "verify": round(verified - converted_at, 2)},
        "checks": [dataclasses.asdict(c) for c in checks],
    }
    with open(os.path.join(output_dir, REPORT_JSON), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    with open(os.path.join(output_dir, REPORT_MD), "w", encoding="utf-8") as f:
        f.write(report_markdown(report))
    return ImportResult(blessed, report, serving_dir)


def _num(value, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def check_table(checks: Sequence[dict]) -> str:
    """Markdown table of checks; a check that raised shows its error instead of numbers."""
    rows = ["| batch | output | vs | dtype | max abs | max rel | mismatches | ok |",
            "|---|---|---|---|---|---|---|---|"]
    for c in checks:
        verdict = "yes" if c["ok"] else "**NO**"
        if c.get("error"):
            verdict += f" ({c['error']})"
        rows.append(f"| {c['batch']} | {c['output']} | {c['reference']} | {c['dtype']} | "
                    f"{_num(c['max_abs'])} | {_num(c['max_rel'])} | "
                    f"{'-' if c['mismatches'] is None else c['mismatches']} | {verdict} |")
    return "\n".join(rows)


def report_markdown(report: dict) -> str:
    verdict = "equivalent: blessed" if report["blessed"] else "NOT equivalent: not blessed"
    rewrites = report.get("rewrites") or []
    lines = [f"- {r['kind']}: {r['why']} ({', '.join(r['nodes'])})" for r in rewrites]
    return "\n".join([
        "# PyTorchModelImporter report", "",
        f"Result: **{verdict}**", "",
        f"- source: {report['source']['kind']} {report['source']['path']}",
        f"- inputs: {', '.join(report['inputs'])}",
        f"- outputs: {', '.join(report['outputs'])}",
        f"- tolerance: atol {report['tolerance']['atol']}, rtol {report['tolerance']['rtol']}, "
        "integer outputs exact",
        f"- check inputs: {report['inputs_from']}",
        f"- max abs error (float outputs): {_num(report['max_abs_error'])}",
        f"- seconds: {report['seconds']}", "",
        "## Rewrites applied", "",
        *(lines or ["none: the model converted as exported"]), "",
        "## Checks", "",
        check_table(report["checks"]), ""])
