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

import dataclasses
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfx_bridge.components.pytorch_model_importer.errors import (
    ConversionError,
    ImporterConfigError,
    ModelSourceError,
    missing_extra,
)
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec
from tfx_bridge.savedmodel import EXAMPLE_SIGNATURE, SERVING_SIGNATURE

SERVING_DIR = "Format-Serving"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
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
        if not os.path.isfile(self.path):
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
    module_path, _, class_name = source.module_class.partition(":")
    if not module_path or not class_name:
        raise ImporterConfigError(
            f"--module-class {source.module_class!r}: expected pkg.module:ClassName.")
    try:
        cls = getattr(importlib.import_module(module_path), class_name)
    except (ImportError, AttributeError) as e:
        raise ImporterConfigError(
            f"--module-class {source.module_class!r}: cannot import it ({e}). Install the "
            "package that defines it, or fix the path.") from e
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
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelSourceError(
            f"{source.path} does not fit {source.module_class}: missing keys {list(missing)}, "
            f"unexpected keys {list(unexpected)}. Check --module-kwargs and the class version.")
    return module.eval()


def check_external_data(onnx_path: str) -> None:
    """Refuses external-data locations that resolve outside the model's folder."""
    onnx = _onnx()
    model = onnx.load(onnx_path, load_external_data=False)
    folder = os.path.realpath(os.path.dirname(os.path.abspath(onnx_path)))
    bad = []
    for tensor in list(model.graph.initializer):
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


def make_inputs(inputs: Sequence[TensorSpec], batch: int, seed: int = 0
                ) -> Dict[str, np.ndarray]:
    """Random inputs within each spec's dtype and value range."""
    rng = np.random.default_rng([seed, batch])
    out = {}
    for spec in inputs:
        shape = spec.concrete_shape(batch)
        lo, hi = spec.draw_range
        if spec.dtype == "bool":
            out[spec.name] = rng.integers(0, 2, shape).astype(bool)
        elif spec.is_integer:
            out[spec.name] = rng.integers(int(lo), int(hi) + 1, shape).astype(spec.dtype)
        else:
            out[spec.name] = rng.uniform(lo, hi, shape).astype(spec.dtype)
    return out


def inputs_from_examples(examples_dir: str, inputs: Sequence[TensorSpec], count: int
                         ) -> Optional[Dict[str, np.ndarray]]:
    """Up to ``count`` rows of real inputs parsed from an Examples folder."""
    import glob

    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(examples_dir, "Split-*", "*")))
    if not files:
        return None
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP").take(count).batch(count)
    serialized = next(iter(ds), None)
    if serialized is None:
        return None
    parsed = _parse_examples(serialized, inputs)
    return {spec.name: parsed[spec.name].numpy() for spec in inputs}


def _feature_spec(spec: TensorSpec):
    import tensorflow as tf

    wire = tf.float32 if spec.dtype.startswith("float") else tf.int64
    inner = spec.shape[1:]
    if all(d > 0 for d in inner):
        return tf.io.FixedLenFeature(inner, wire)
    if len(inner) == 1:
        return tf.io.VarLenFeature(wire)
    raise ImporterConfigError(
        f"Input {spec.name!r} {spec.shape}: the tf.Example signature parses fixed shapes or "
        "one variable-length dimension; declare the inner dimensions.")


def _parse_examples(serialized, inputs: Sequence[TensorSpec]) -> Dict[str, object]:
    """tf.io.parse_example with the wire dtypes, then a cast to each declared dtype."""
    import tensorflow as tf

    parsed = tf.io.parse_example(serialized, {s.name: _feature_spec(s) for s in inputs})
    out = {}
    for s in inputs:
        value = parsed[s.name]
        if isinstance(value, tf.sparse.SparseTensor):
            value = tf.sparse.to_dense(value)
        out[s.name] = tf.cast(value, tf.as_dtype(s.dtype))
    return out


# --------------------------------------------------------------------------- export


def export_onnx(module, inputs: Sequence[TensorSpec], output_names: Sequence[str], path: str,
                opset: int = DEFAULT_OPSET) -> None:
    """torch.onnx.export with named inputs/outputs and a dynamic axis per -1."""
    torch = _torch()
    onnx = _onnx()
    if not MIN_OPSET <= opset <= 20:
        raise ImporterConfigError(f"opset {opset}: use {MIN_OPSET} to 20 (default 17).")
    sample = make_inputs(inputs, batch=2)
    args = tuple(torch.from_numpy(sample[s.name]) for s in inputs)
    dynamic = {s.name: {i: ("batch" if i == 0 else f"{s.name}_dim{i}")
                        for i, d in enumerate(s.shape) if d < 0} for s in inputs}
    for name in output_names:
        dynamic[name] = {0: "batch"}
    try:
        with torch.no_grad():
            torch.onnx.export(module, args, path, input_names=[s.name for s in inputs],
                              output_names=list(output_names), dynamic_axes=dynamic,
                              opset_version=opset, do_constant_folding=True, dynamo=False)
    except Exception as e:
        raise ModelSourceError(
            f"torch.onnx.export failed: {type(e).__name__}: {str(e).splitlines()[0]}. Check the "
            "declared inputs match forward()'s arguments in order, and write data-dependent "
            "control flow densely (e.g. top-k gates as topk + gather).") from e
    model = onnx.load(path)
    if len(model.graph.output) != len(output_names):
        raise ImporterConfigError(
            f"The model returns {len(model.graph.output)} output(s) but "
            f"{len(output_names)} --output-name were given ({list(output_names)}).")
    onnx.checker.check_model(model)
    onnx.save(onnx.shape_inference.infer_shapes(model), path)


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

_ONNX2TF_SCRIPT = """
import sys
import onnx2tf
keep = [n for n in sys.argv[3].split(",") if n]
onnx2tf.convert(input_onnx_file_path=sys.argv[1], output_folder_path=sys.argv[2],
                output_signaturedefs=True, keep_shape_absolutely_input_names=keep or None,
                non_verbose=True)
"""
_FAILED_OP = re.compile(r"onnx_op_type:\s*(\S+)\s+onnx_op_name:\s*(\S+)")


def convert_onnx_to_tf(onnx_path: str, workdir: str, inputs: Sequence[TensorSpec]) -> str:
    """onnx2tf in a subprocess on a private copy; returns the SavedModel folder."""
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
    proc = subprocess.run([sys.executable, "-c", _ONNX2TF_SCRIPT, private, out, keep],
                          capture_output=True, text=True, env=env, cwd=workdir,
                          timeout=CONVERT_TIMEOUT_S)
    if proc.returncode != 0 or not os.path.exists(os.path.join(out, "saved_model.pb")):
        text = proc.stdout + "\n" + proc.stderr
        m = _FAILED_OP.search(text)
        last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
        if m:
            raise ConversionError(
                f"onnx2tf cannot convert ONNX op {m.group(1)} (node {m.group(2)}): {last[0]}. "
                "Rewrite that part of the PyTorch model with supported ops (e.g. dense "
                "topk + gather instead of nonzero/index routing) and re-export.")
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
        parsed = _parse_examples(serialized, inputs)
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
    batch: int
    output: str
    reference: str
    dtype: str
    max_abs: float
    max_rel: float
    mismatches: int
    ok: bool


def _compare(ref: np.ndarray, got: np.ndarray, atol: float, rtol: float
             ) -> Tuple[float, float, int, bool]:
    if ref.shape != got.shape:
        return float("inf"), float("inf"), int(max(ref.size, got.size)), False
    if np.issubdtype(ref.dtype, np.integer) or ref.dtype == bool:
        bad = int(np.count_nonzero(ref.astype(np.int64) != got.astype(np.int64)))
        diff = np.abs(ref.astype(np.int64) - got.astype(np.int64))
        return float(diff.max(initial=0)), 0.0, bad, bad == 0
    r = ref.astype(np.float64)
    g = got.astype(np.float64)
    diff = np.abs(r - g)
    both_nan = np.isnan(r) & np.isnan(g)
    diff[both_nan] = 0.0
    rel = diff / np.maximum(np.abs(r), 1e-12)
    bad = int(np.count_nonzero(~(diff <= atol + rtol * np.abs(r))))
    return float(diff.max(initial=0)), float(rel.max(initial=0)), bad, bad == 0


def run_torch(module, feeds: Dict[str, np.ndarray], inputs: Sequence[TensorSpec]
              ) -> List[np.ndarray]:
    torch = _torch()
    with torch.no_grad():
        out = module(*[torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in inputs])
    out = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().cpu().numpy() for o in out]


def run_ort(onnx_path: str, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise missing_extra("onnxruntime", e) from e
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def verify(saved_model_dir: str, onnx_path: str, inputs: Sequence[TensorSpec],
           output_names: Sequence[str], torch_module=None, atol: float = DEFAULT_ATOL,
           rtol: float = 0.0, batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
           real_inputs: Optional[Dict[str, np.ndarray]] = None) -> List[OutputCheck]:
    """TF vs torch (when given) and vs onnxruntime, per batch size and output."""
    import tensorflow as tf

    loaded = tf.saved_model.load(saved_model_dir)
    serve = loaded.signatures[SERVING_SIGNATURE]
    serve_examples = loaded.signatures[EXAMPLE_SIGNATURE]
    checks: List[OutputCheck] = []
    for batch in batch_sizes:
        feeds = make_inputs(inputs, batch)
        if real_inputs is not None:
            n = len(next(iter(real_inputs.values())))
            if n:
                take = np.arange(batch) % n
                feeds = {k: v[take] for k, v in real_inputs.items()}
        got = serve(**{k: tf.constant(v) for k, v in feeds.items()})
        got = [got[name].numpy() for name in output_names]
        refs = [("onnxruntime", run_ort(onnx_path, feeds))]
        if torch_module is not None:
            refs.insert(0, ("torch", run_torch(torch_module, feeds, inputs)))
        for ref_name, ref_out in refs:
            for name, r, g in zip(output_names, ref_out, got, strict=True):
                max_abs, max_rel, bad, ok = _compare(np.asarray(r), g, atol, rtol)
                checks.append(OutputCheck(batch, name, ref_name, str(np.asarray(r).dtype),
                                          max_abs, max_rel, bad, ok))
        if batch == batch_sizes[min(1, len(batch_sizes) - 1)]:
            serialized = examples_from_feeds(feeds, inputs)
            via = serve_examples(**{EXAMPLE_INPUT: tf.constant(serialized)})
            for name, g in zip(output_names, got, strict=True):
                max_abs, max_rel, bad, ok = _compare(g, via[name].numpy(), atol, rtol)
                checks.append(OutputCheck(batch, name, SERVING_SIGNATURE + " via tf.Example",
                                          str(g.dtype), max_abs, max_rel, bad, ok))
    return checks


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
                 tamper_onnx=None) -> ImportResult:
    """Runs every step into ``output_dir`` (the Model artifact layout).

    ``tamper_onnx`` (tests only) edits the exported ONNX before conversion, to
    prove the equivalence gate catches a broken conversion.
    """
    start = time.perf_counter()
    serving_dir = os.path.join(output_dir, SERVING_DIR)
    if os.path.exists(serving_dir):
        shutil.rmtree(serving_dir)
    os.makedirs(output_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-import-") as work:
        onnx_path = os.path.join(work, "model.onnx")
        module = None
        if source.kind == SOURCE_ONNX:
            rename_onnx_io(source.path, onnx_path, inputs, output_names)
        else:
            module = load_torch_module(source)
            export_onnx(module, inputs, output_names, onnx_path, opset)
        if tamper_onnx is not None:
            tamper_onnx(onnx_path)
        exported = time.perf_counter()
        converted = convert_onnx_to_tf(onnx_path, work, inputs)
        wrap_saved_model(converted, serving_dir, inputs, output_names, schema)
        converted_at = time.perf_counter()
        real = (inputs_from_examples(examples_dir, inputs, max(batch_sizes))
                if examples_dir else None)
        checks = verify(serving_dir, onnx_path, inputs, output_names, module, atol, rtol,
                        batch_sizes, real)
        verified = time.perf_counter()
    blessed = all(c.ok for c in checks)
    worst = max((c.max_abs for c in checks if not c.dtype.startswith(("int", "uint", "bool"))),
                default=0.0)
    report = {
        "blessed": blessed,
        "source": {"kind": source.kind, "path": os.path.abspath(source.path),
                   "module_class": source.module_class},
        "opset": opset if source.kind != SOURCE_ONNX else None,
        "inputs": [s.to_text() for s in inputs],
        "outputs": list(output_names),
        "signatures": {
            SERVING_SIGNATURE: "declared inputs -> named outputs",
            EXAMPLE_SIGNATURE: f"{EXAMPLE_INPUT}: string [None] (serialized tf.Example)"},
        "tolerance": {"atol": atol, "rtol": rtol, "integer_outputs": "exact"},
        "inputs_from": "examples" if examples_dir and real is not None else "random",
        "max_abs_error": worst,
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


def check_table(checks: Sequence[dict]) -> str:
    rows = ["| batch | output | vs | dtype | max abs | max rel | mismatches | ok |",
            "|---|---|---|---|---|---|---|---|"]
    for c in checks:
        rows.append(f"| {c['batch']} | {c['output']} | {c['reference']} | {c['dtype']} | "
                    f"{c['max_abs']:.3g} | {c['max_rel']:.3g} | {c['mismatches']} | "
                    f"{'yes' if c['ok'] else '**NO**'} |")
    return "\n".join(rows)


def report_markdown(report: dict) -> str:
    verdict = "equivalent: blessed" if report["blessed"] else "NOT equivalent: not blessed"
    return "\n".join([
        "# PyTorchModelImporter report", "",
        f"Result: **{verdict}**", "",
        f"- source: {report['source']['kind']} {report['source']['path']}",
        f"- inputs: {', '.join(report['inputs'])}",
        f"- outputs: {', '.join(report['outputs'])}",
        f"- tolerance: atol {report['tolerance']['atol']}, rtol {report['tolerance']['rtol']}, "
        "integer outputs exact",
        f"- check inputs: {report['inputs_from']}",
        f"- seconds: {report['seconds']}", "",
        check_table(report["checks"]), ""])
