"""PyTorch -> ONNX -> TF SavedModel with a named signature, and proof of equivalence.

The core of PyTorchModelImporter and ``tfx-bridge import-model`` (both call
:func:`import_model`, so both write the same Model artifact): no TFX imports;
torch, onnx and onnxruntime are imported lazily (the ``onnx`` extra). The
stages, one module each:

1. source.py: load the source: a TorchScript file, a state_dict +
   ``pkg.mod:Class`` (``torch.load(weights_only=True)``: no arbitrary
   unpickling), or ONNX (external data must stay inside the model's folder).
2. export/: ``torch.onnx.export`` (TorchScript exporter, opset 17 by
   default), a dynamic axis for every -1, with the export's rewrites (fused
   PyTorch kernels decomposed, modules swapped, torch symbolics replaced),
   then ``onnx.checker`` and shape inference; an ONNX hand-over is renamed to
   the declared signature.
3. to_tf.py: the converters (to_tf.py chooses): our own, op by op
   in ONNX semantics, or onnx2tf in a child process.
4. wrap.py: ``serving_default`` with exactly the declared names, dtypes and
   shapes, and ``serving_tf_example`` (serialized tf.Examples) for TFX
   Evaluator and InfraValidator.
5. verify.py: torch (for torch sources), onnxruntime and the SavedModel
   (loaded in a fresh process with oneDNN off) on the same inputs at batch
   sizes 1, 7 and 32; integer outputs must match exactly.
6. report.py: report.json and report.md, with the likely cause of a model that
   does not verify (random_draws.py for a model that samples in its forward);
   source.py's ``Format-PyTorch/`` copy and source digest.

Size: only the orchestration of those stages (one attempt, its row-wise retry
and the report's fields), which share the job's and the attempt's state; each
stage's work lives in its own module.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from typing import Any, Callable, List, Optional, Sequence

from tfx_bridge.artifacts import examples, layout, savedmodel
from tfx_bridge.artifacts.savedmodel import EXAMPLE_SIGNATURE, SERVING_SIGNATURE
from tfx_bridge.components.pytorch_model_importer import (
    detection,
    detection_import,
    onnx_runs,
    random_draws,
    rewrite,
    to_tf,
    transform_wrap,
)
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
from tfx_bridge.components.pytorch_model_importer.digest import digest_settings, source_digest
from tfx_bridge.components.pytorch_model_importer.errors import (
    ConversionError,
    ImporterError,
    ModelSourceError,
)
from tfx_bridge.components.pytorch_model_importer.export.stage import (
    EXPORT_BATCH,
    UNUSED_INPUT,
    export_onnx,
    export_prefix,
    rename_onnx_io,
    unused_rewrite,
)
from tfx_bridge.components.pytorch_model_importer.report import write_report
from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec, make_inputs
from tfx_bridge.components.pytorch_model_importer.source import (
    SOURCE_ONNX,
    ModelSource,
    carry_pytorch,
    lazy_torch,
    load_torch_module,
)
from tfx_bridge.components.pytorch_model_importer.verify import (
    DEFAULT_BATCH_SIZES,
    ExportFinding,
    OutputCheck,
    max_float_error,
    run_ort,
    run_torch,
    verify,
)
from tfx_bridge.components.pytorch_model_importer.wrap import EXAMPLE_INPUT, wrap_saved_model
from tfx_bridge.storage import fs

SERVING_DIR = savedmodel.SERVING_DIR
REPORT_JSON = layout.REPORT_JSON
REPORT_MD = layout.REPORT_MD
ROW_WISE_SERVING = "row-wise-serving"  # the report's rewrite kind


@dataclasses.dataclass
class ImportResult:
    blessed: bool
    report: dict
    serving_dir: str
    source: ModelSource  # as resolved: a model folder's spec names the weights file
    output_names: List[str]


@dataclasses.dataclass(frozen=True)
class _Job:
    """What one import is asked to do, on local paths: every stage reads it from here."""

    source: ModelSource
    inputs: Sequence[TensorSpec]
    output_names: Sequence[str]
    opset: int
    atol: float
    rtol: float
    batch_sizes: Sequence[int]
    examples_dir: Optional[str]
    schema: Any
    tamper_onnx: Optional[Callable[[str], None]]
    graph_rewrites: bool
    transform_dir: Optional[str]
    transformed_examples_dir: Optional[str]
    converter: str
    progress: Optional[Callable[[str], None]] = None  # told as each stage ends
    task: str = detection.TASK_TENSORS
    max_detections: Optional[int] = None

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)


def import_model(config: ImporterConfig, output_dir: str, source_model: str = "",
                 examples_dir: Optional[str] = None, schema=None,
                 transform_dir: Optional[str] = None,
                 transformed_examples_dir: Optional[str] = None,
                 batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
                 tamper_onnx: Optional[Callable[[str], None]] = None,
                 progress: Optional[Callable[[str], None]] = None) -> ImportResult:
    """Imports what ``config`` names into ``output_dir`` (the Model artifact layout).

    The source, inputs and outputs are ``config.resolve(source_model)``'s: a model
    folder's ``Format-PyTorch/`` spec when ``source_model`` holds one, else the
    declared ones. ``config.converter``: ``auto`` (ours, onnx2tf for a graph ours
    refuses), ``tfx-bridge`` or ``onnx2tf`` (to_tf.py);
    ``config.graph_rewrites=False`` gives onnx2tf the exported ONNX as it is. With
    ``transform_dir`` (a TFX TransformGraph), the SavedModel serves raw features
    through the Transform graph (see :mod:`.transform_wrap`): the model's inputs
    are transformed features; ``examples_dir`` then holds the raw Examples and
    ``transformed_examples_dir`` Transform's materialised ones, for the skew check
    across the chain. A state_dict source is carried as ``Format-PyTorch/`` and the
    report holds the source digest, so the component and the CLI write the same
    artifact. ``progress(line)`` is told as each stage ends (export, conversion,
    verification), for a CLI's progress lines. ``tamper_onnx`` (tests only) edits
    the ONNX given to the converter, to prove the equivalence gate catches a broken
    conversion.

    Every path may be a URI. torch, onnx and the converters read and write local
    files only: a remote source is copied to a local folder first (an ONNX file
    with the folder beside it, for its external data), the output is written
    locally and uploaded when every step has finished, and both copies are removed.
    """
    source, inputs, output_names = config.resolve(source_model)
    if progress is not None:
        progress(f"loading {source.kind} {source.path} and exporting it (torch and ONNX "
                 "load first: some seconds)")
    remote_onnx = source.kind == SOURCE_ONNX and fs.is_remote(source.path)
    source_root = fs.dirname(source.path) if remote_onnx else source.path
    with fs.staged_locally(source_root, transform_dir, output=output_dir) as (
            local_root, transform, local_out):
        local_path = (os.path.join(local_root, fs.basename(source.path)) if remote_onnx
                      else local_root)
        local_source = dataclasses.replace(source, path=local_path)
        digest = source_digest(local_source, [s.to_text() for s in inputs], output_names,
                               digest_settings(config), transform)
        job = _Job(local_source, inputs, output_names, config.opset, config.atol,
                   config.rtol, batch_sizes, examples_dir, schema, tamper_onnx,
                   config.graph_rewrites, transform, transformed_examples_dir,
                   config.converter, progress, config.task, config.max_detections)
        if config.task == detection.TASK_DETECTION:
            blessed, report, serving, outputs = detection_import.import_detector(
                job, local_out, source, digest)
            result = ImportResult(blessed, report, serving, source, outputs)
        else:
            result = _import_local(job, local_out, shown_source=source,
                                   shown_transform=transform_dir, digest=digest)
    if config.task != detection.TASK_DETECTION:  # Format-PyTorch/ describes tensor models
        carry_pytorch(source, [s.to_text() for s in inputs], output_names, output_dir)
    if fs.is_remote(output_dir):
        result.serving_dir = fs.join(output_dir, SERVING_DIR)
    return result


def _import_local(job: _Job, output_dir: str, shown_source: ModelSource,
                  shown_transform: Optional[str] = None,
                  digest: Optional[str] = None) -> ImportResult:
    """Runs every step into ``output_dir`` (the Model artifact layout).

    ``job.graph_rewrites=False`` gives onnx2tf the exported ONNX as it is (no
    onnx2tf/graph_rewrites.py rewrites; the export's rewrites still apply), to measure what the
    ONNX-level rewrites buy.
    """
    source, inputs, output_names = job.source, job.inputs, job.output_names
    opset, atol, rtol, transform_dir = job.opset, job.atol, job.rtol, job.transform_dir
    serving_dir = os.path.join(output_dir, SERVING_DIR)
    if transform_dir:  # a name mismatch is refused before the minutes of conversion
        transform_wrap.check_model_inputs(inputs, transform_wrap.transformed_spec(transform_dir))
    retried_after = None  # seconds spent on the batch-32 export before the row-wise one
    module = load_torch_module(source) if source.kind != SOURCE_ONNX else None
    types = rewrite.module_types(module, prefix=export_prefix(module))
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-import-") as work:
        run = _attempt(job, module, types, work, serving_dir, output_dir, EXPORT_BATCH,
                       row_wise=False)
        if module is not None and not _is_script(module) and \
                frozen_batch(run.checks, run.findings, atol, EXPORT_BATCH):
            # Right at the export batch only: the model's code loops over or sizes by
            # the batch (GPTSAN's `for i in range(num_batch)`, TAPAS's segments per
            # batch). Rows are independent in inference, so the graph exported for one
            # row, run row by row, is the model; it must verify like any other.
            rows_work = os.path.join(work, "rows")
            try:
                rows = _attempt(job, module, types, rows_work,
                                os.path.join(rows_work, SERVING_DIR), rows_work, 1,
                                row_wise=True)
            except ImporterError:
                rows = None  # one row does not even export: the first attempt stands
            if rows is not None and all(c.ok for c in rows.checks):
                shutil.rmtree(serving_dir)
                shutil.move(os.path.join(rows_work, SERVING_DIR), serving_dir)
                rows.rewrites.append(Rewrite(
                    ROW_WISE_SERVING, [f"export batch {EXPORT_BATCH} -> 1"],
                    f"the graph exported at batch {EXPORT_BATCH} is right at that batch "
                    "only (the model's code loops over or sizes by the batch); exported "
                    "for one row and served row by row (tf.map_fn), verified at every "
                    "batch checked"))
                retried_after = round(rows.started - run.started, 2)
                run = rows
    rewrites, conversion, checks, findings = run.rewrites, run.conversion, run.checks, \
        run.findings
    raw_inputs, chain, feeds_from, real = run.raw_inputs, run.chain, run.feeds_from, run.real
    exported, converted_at, verified = run.exported, run.converted_at, run.verified
    trace_warnings = run.trace_warnings
    start = run.started  # the stages' seconds are the served attempt's
    blessed = all(c.ok for c in checks)
    worst = max_float_error(checks)
    report = {
        "blessed": blessed,
        "source": {"kind": source.kind,
                   "path": shown_source.path if fs.is_remote(shown_source.path)
                   else os.path.abspath(shown_source.path),
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
        # torch's TracerWarnings during export: Python branches frozen for its sample.
        "trace_warnings": trace_warnings,
        # onnxruntime on the exported ONNX vs torch where they differ (None: no torch
        # source; empty: the export is torch's computation at every batch checked).
        "export_check": (None if findings is None
                         else [dataclasses.asdict(f) for f in findings]),
        # Random ops in the exported graph, where the reference differs from itself on
        # one input (random_draws.py; None: blessed, or no draw found).
        "random_draws": run.random_draws,
        # The converter that produced the served graph, and every one tried.
        "converter": conversion.converter,
        "conversion_attempts": conversion.attempts,
        "source_digest": digest,
        # Seconds of the batch-32 attempt before the row-wise one (None: not retried).
        "row_wise_retry_after_s": retried_after,
        "seconds": {"export": round(exported - start, 2),
                    "convert": round(converted_at - exported, 2),
                    "verify": round(verified - converted_at, 2)},
        "checks": [dataclasses.asdict(c) for c in checks],
    }
    write_report(output_dir, report)
    return ImportResult(blessed, report, serving_dir, shown_source, list(output_names))


@dataclasses.dataclass
class _Attempt:
    """One export -> convert -> wrap -> verify pass (convert.py's stages 2 to 5)."""

    rewrites: list
    conversion: object
    checks: list
    findings: Optional[list]
    raw_inputs: Optional[list]
    chain: Optional[dict]
    feeds_from: Optional[str]
    real: Optional[dict]
    trace_warnings: Optional[List[str]]
    random_draws: Optional[dict]
    started: float
    exported: float
    converted_at: float
    verified: float


def _attempt(job: _Job, module, types, work: str, serving_dir: str, output_dir: str,
             export_batch: int, row_wise: bool) -> _Attempt:
    """Exports (torch sources) with a batch-``export_batch`` sample, converts, wraps
    into ``serving_dir`` (row by row when ``row_wise``) and verifies."""
    source, inputs, output_names = job.source, job.inputs, job.output_names
    atol, rtol, batch_sizes, transform_dir = job.atol, job.rtol, job.batch_sizes, job.transform_dir
    examples_dir, transformed_examples_dir = job.examples_dir, job.transformed_examples_dir
    started = time.perf_counter()
    os.makedirs(work, exist_ok=True)
    onnx_path = os.path.join(work, "model.onnx")
    trace_warnings: Optional[List[str]] = None  # None: nothing was traced (ONNX)
    if source.kind == SOURCE_ONNX:
        unused = rename_onnx_io(source.path, onnx_path, inputs, output_names)
        rewrites = [unused_rewrite(unused)] if unused else []
    else:
        trace_warnings = []
        rewrites = export_onnx(module, inputs, output_names, onnx_path, job.opset,
                               trace_warnings, batch=export_batch)
    # Named by the export, or by the hand-over's graph.
    unused = next((r.nodes for r in rewrites if r.kind == UNUSED_INPUT), [])
    # The converter gets a copy; the reference (onnxruntime) runs the ONNX as exported.
    to_convert = os.path.join(work, "model_to_convert.onnx")
    shutil.copyfile(onnx_path, to_convert)
    if job.tamper_onnx is not None:
        job.tamper_onnx(to_convert)
    exported = time.perf_counter()
    job.say(f"exported to ONNX{' (row by row)' if row_wise else ''} in "
            f"{exported - started:.1f}s" if module is not None else "read the ONNX file")
    try:
        conversion = to_tf.to_saved_model(to_convert, work, inputs, types, job.converter,
                                          job.graph_rewrites)
    except ConversionError as e:
        broken = onnx_runs.failure(onnx_path, inputs,
                                   lambda op, node: rewrite.describe_node(op, node, types))
        if broken is None:
            raise
        raise ModelSourceError(onnx_runs.message(source.kind, broken, str(e))) from None
    rewrites += conversion.rewrites
    converted = conversion.saved_model
    if os.path.exists(serving_dir):
        shutil.rmtree(serving_dir)
    os.makedirs(output_dir, exist_ok=True)
    # With Transform, the converted model is wrapped twice: model inputs -> outputs
    # (checked against torch and onnxruntime), then raw features -> that model.
    model_dir = os.path.join(work, "model-inputs") if transform_dir else serving_dir
    wrap_saved_model(converted, model_dir, inputs, output_names,
                     None if transform_dir else job.schema, unused, row_wise=row_wise)
    raw_inputs = None
    if transform_dir:
        raw_inputs = transform_wrap.wrap(model_dir, serving_dir, transform_dir, inputs,
                                         output_names)
    converted_at = time.perf_counter()
    job.say(f"converted with {conversion.converter} and wrapped in "
            f"{converted_at - exported:.1f}s")
    feeds_from = transformed_examples_dir if transform_dir else examples_dir
    if transform_dir and not transformed_examples_dir:
        feeds_from = None
    real = (examples.inputs_from_examples(feeds_from, inputs, max(batch_sizes))
            if feeds_from else None)
    findings: Optional[List[ExportFinding]] = [] if module is not None else None
    checks = verify(model_dir, onnx_path, inputs, output_names, module, atol, rtol,
                    batch_sizes, real, findings, row_wise=row_wise)
    for f in findings or []:
        if f.node is not None:
            f.where = rewrite.describe_node(f.op or "?", f.node, types)
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
    job.say(f"verified at batch sizes {list(batch_sizes)} against "
            f"{'torch and ' if module is not None else ''}onnxruntime in "
            f"{verified - converted_at:.1f}s: {sum(c.ok for c in checks)} of {len(checks)} "
            "checks passed")
    draws = None
    if not all(c.ok for c in checks):
        one = make_inputs(inputs, 1)
        draws = random_draws.stochastic_finding(
            onnx_path, lambda op, node: rewrite.describe_node(op, node, types),
            (lambda: run_torch(module, one, inputs)) if module is not None
            else random_draws.one_session_runs(onnx_path, one),
            "torch" if module is not None else "onnxruntime")
    return _Attempt(rewrites, conversion, checks, findings, raw_inputs, chain, feeds_from,
                    real, trace_warnings, draws, started, exported, converted_at, verified)


def frozen_batch(checks, findings, atol: float, export_batch: int) -> bool:
    """True when the exported graph froze the batch size: the SavedModel matches torch
    at the export batch, and at every other batch checked it raises, or the
    export itself (onnxruntime on it, ``findings``) is off torch there. A
    conversion merely over the tolerance is not that."""
    torch_checks = [c for c in checks if c.reference == "torch"]
    at_export = [c for c in torch_checks if c.batch == export_batch]
    others = {c.batch for c in torch_checks if c.batch != export_batch}
    if not at_export or not all(c.ok for c in at_export) or not others:
        return False
    export_off = {f.batch for f in findings or []
                  if f.error is not None or f.max_abs is None or f.max_abs > atol}
    raised = {c.batch for c in torch_checks if not c.ok and (c.error or c.max_abs is None)}
    return others <= (raised | export_off)


def _is_script(module) -> bool:
    """A TorchScript module: its graph is already traced, so a new export sample
    changes nothing."""
    torch = lazy_torch()
    return isinstance(module, (torch.jit.ScriptModule, torch.jit.ScriptFunction))
