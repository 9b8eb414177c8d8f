"""The ``tfx-bridge`` console script.

Verbs call the same cores as the components' executors. Every verb takes
``--json`` (the last stdout line is then a one-line JSON summary) and
``--debug`` (show tracebacks). Exit codes: 0 done; 1 a check failed;
2 bad usage or bad input (one message on stderr); 3 an internal error;
4 busy: another run holds a lock, retry later (docs/ARCHITECTURE.md).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Optional

from tfx_bridge import fs, objectstore, staging
from tfx_bridge.errors import BridgeError

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_BUSY = 4

DEFAULT_DEMO_DIR = "demo_output"
DEFAULT_TRAIN_STEPS = 150
# Where kubeflow/Dockerfile puts schemas/ inside the component image.
IMAGE_SCHEMAS = "/tfx-bridge/schemas/"


def _quiet_libraries() -> None:
    """TF/TFX/Beam log a great deal at INFO; a CLI user wants our progress lines."""
    # 3: TF prints CUDA-plugin registration errors at import on CPU hosts.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    # Beam logs a DoFn's exception (with its traceback) at ERROR before it reaches us;
    # the CLI prints the one message itself, and --debug shows everything.
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    from absl import logging as absl_logging
    absl_logging.set_verbosity(absl_logging.ERROR)


PIPELINE_LOG = "pipeline.log"
LIBRARY_LOG = "library.log"

# Top-level entries each verb writes under --output (tfx_bridge.staging refuses
# an output holding anything else, and replaces these only after a run succeeds).
INGEST_WRITES = ("Split-*", "source_schema.json")
VALIDATE_WRITES = ("Split-*", "findings.json", "report.md", "report.html")
IMPORT_WRITES = ("Format-Serving", "Format-PyTorch", "report.json", "report.md")
OPTIMIZE_WRITES = ("Format-Serving", "report.json", "report.md", "latency.png", LIBRARY_LOG)


class UsageError(BridgeError):
    """Options that do not go together; exit 2 with the one message."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error with --json still ends with a JSON line on stdout."""

    json_requested = False

    def error(self, message: str):
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        if _Parser.json_requested:
            verb = self.prog.split()[1] if len(self.prog.split()) > 1 else None
            print(json.dumps({"verb": verb, "ok": False, "exit_code": EXIT_BAD_INPUT,
                              "error": message, "error_type": "UsageError"}, sort_keys=True))
        sys.exit(EXIT_BAD_INPUT)


def _shown(path: str) -> str:
    """A path as the user should see it: absolute when local, a URI as given."""
    return path if "://" in path else os.path.abspath(path)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


@contextlib.contextmanager
def _library_logs(workdir: str, debug: bool, name: str = PIPELINE_LOG):
    """XLA, MLIR and Beam's workers write to file descriptor 2 directly, past Python's
    logging; unless ``debug``, fd 2 goes to <workdir>/pipeline.log while the pipeline
    runs. Yields the note for the progress line ("" with ``debug``)."""
    if debug:
        yield ""
        return
    import tempfile

    # A file descriptor needs a local file: for a remote workdir the log is
    # written locally and uploaded beside the outputs afterwards.
    remote = fs.is_remote(workdir)
    local_dir = tempfile.mkdtemp(prefix="tfx-bridge-log-") if remote else workdir
    path = os.path.join(local_dir, name)
    os.makedirs(local_dir, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield f"; library logs in {fs.join(workdir, name)}"
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if remote:
            fs.copy(path, fs.join(workdir, name))
            fs.remove(local_dir)


class Progress:
    """Numbered progress lines on stderr, so stdout stays for results."""

    def __init__(self, steps: int, enabled: bool = True):
        self._steps = steps
        self._step = 0
        self._enabled = enabled
        self._start = time.monotonic()

    def __call__(self, message: str) -> None:
        self._step += 1
        if self._enabled:
            elapsed = time.monotonic() - self._start
            print(f"[{self._step}/{self._steps}] {message} ({elapsed:.1f}s)", file=sys.stderr,
                  flush=True)


def _direct_pipeline_factory(num_workers: Optional[int]) -> Callable[[], Any]:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfx_bridge.pipelines.beam_args import direct_runner_args

    args = direct_runner_args(num_workers)
    args += objectstore.beam_s3_args(args)
    objectstore.set_beam_options(args)

    def make():
        return beam.Pipeline(options=PipelineOptions(args))
    return make


# --------------------------------------------------------------------------- ingest


def cmd_ingest(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core

    columns = None if args.columns is None else [c.strip() for c in args.columns.split(",")]
    progress = Progress(3, enabled=not args.quiet)
    splits = core.SplitConfig.parse(args.splits, args.pattern, args.partition_feature)
    make_pipeline = _direct_pipeline_factory(args.workers)  # sets Beam's s3 options too
    plan = core.plan_ingest(args.input_base, splits, columns=columns,
                            batch_size=args.batch_size)
    progress(f"Planned {plan.num_rows} rows in {len(plan.files)} file(s), "
             f"{len(plan.units)} row group(s), {len(plan.columns)} column(s)")
    start = time.monotonic()
    with staging.staged_output(args.output, INGEST_WRITES, "ingest") as stage:
        counts = core.ingest(plan, stage, make_pipeline)
    seconds = time.monotonic() - start
    progress(f"Wrote {sum(counts.values())} tf.Examples to {args.output}")
    for name, n in counts.items():
        print(f"  Split-{name}: {n} records")
    for col in plan.columns:
        print(f"  {col.name}: {col.arrow_type} -> {col.feature}")
    progress("Done")
    return {
        "output": _shown(args.output),
        "rows": plan.num_rows,
        "files": len(plan.files),
        "splits": counts,
        "columns": {c.name: c.feature for c in plan.columns},
        "seconds": round(seconds, 3),
        "rows_per_second": round(plan.num_rows / seconds, 1) if seconds > 0 else None,
    }


# --------------------------------------------------------------------------- validate


def cmd_validate(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.schema_guard import contract as contracts
    from tfx_bridge.components.schema_guard import guard, report

    progress = Progress(3, enabled=not args.quiet)
    schema = guard.load_schema(args.schema)
    consumer = None
    if args.model:
        consumer = contracts.contract_from_saved_model(args.model)
    if args.contract:
        from_file = contracts.load_contract_file(args.contract)
        consumer = from_file if consumer is None else consumer.merged(from_file)
    config = guard.GuardConfig(guard.expectations_from_schema(schema),
                               consumer.features if consumer is not None else (),
                               max_record_bytes=args.max_record_mb << 20)
    splits = guard.list_splits(args.examples)
    progress(f"Checking splits {splits} of {args.examples} against {len(config.expectations)} "
             f"schema features and {len(config.consumer)} consumer features")
    findings = guard.scan_examples(args.examples, config, splits)
    context = {"examples": _shown(args.examples), "schema": args.schema,
               "consumer": consumer.origin if consumer is not None else "none"}
    with staging.staged_output(args.output, VALIDATE_WRITES, "validate") as stage:
        summary = report.write_reports(stage, findings, splits, schema, context)
    progress(f"Checked {sum(findings.records.values())} records: "
             f"{summary['findings']} finding(s)")
    lines = report.summary_lines(findings)
    print("Clean: no findings." if not lines else f"{len(lines)} finding(s):")
    for line in lines:
        print(f"- {line}")
    print(f"Report: {fs.join(_shown(args.output), report.REPORT_MD)}")
    progress("Done")
    return {"blessed": summary["blessed"], "findings": summary["findings"],
            "records": findings.records, "output": _shown(args.output),
            "checks": sorted({f.check for f in findings.sorted()}),
            "_exit": EXIT_OK if summary["blessed"] else EXIT_CHECK_FAILED}


# --------------------------------------------------------------------------- import-model


def cmd_import_model(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.pytorch_model_importer import convert, signature
    from tfx_bridge.components.pytorch_model_importer import source as model_source
    from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError

    chosen = [(k, p) for k, p in (("torchscript", args.torchscript),
                                  ("state_dict", args.state_dict), ("onnx", args.onnx),
                                  ("source_model", args.source_model)) if p]
    if len(chosen) != 1:
        raise ImporterConfigError(
            "Give exactly one of --torchscript FILE, --state-dict FILE (with --module-class), "
            "--onnx FILE, --source-model DIR (a Model folder holding Format-PyTorch/).")
    try:
        kwargs = json.loads(args.module_kwargs) if args.module_kwargs else None
    except ValueError as e:
        raise ImporterConfigError(f"--module-kwargs is not JSON: {e}") from e
    if args.source_model:  # the component's source_model route: the spec inside decides
        if not model_source.has_pytorch_spec(args.source_model):
            raise ImporterConfigError(
                f"--source-model {args.source_model} holds no Format-PyTorch/model_spec.json "
                "(a PyTorchTrainer or importer output); give the model file instead.")
        source, input_texts, output_texts = model_source.from_model_folder(
            args.source_model, args.input or [], args.output_name or [], args.module_class)
    else:
        source = convert.ModelSource(chosen[0][0], chosen[0][1], args.module_class, kwargs)
        input_texts, output_texts = args.input or [], args.output_name or []
    inputs = signature.parse_input_specs(input_texts)
    outputs = signature.check_output_names(output_texts)
    schema = None
    if args.schema:
        from tfx_bridge import schema_file
        schema = schema_file.load_schema(args.schema, ImporterConfigError)
    progress = Progress(2, enabled=not args.quiet)
    with staging.staged_output(args.output, IMPORT_WRITES, "import-model") as stage:
        result = convert.import_model(source, inputs, outputs, stage, opset=args.opset,
                                      atol=args.atol, rtol=args.rtol,
                                      examples_dir=args.examples, schema=schema,
                                      graph_rewrites=not args.no_graph_rewrites,
                                      converter=args.converter)
    serving_dir = staging.final_path(result.serving_dir, stage, args.output)
    progress(f"Exported, converted ({result.report['converter']}) and checked {source.kind} "
             f"{source.path} in {sum(result.report['seconds'].values()):.1f}s")
    print(convert.check_table(result.report["checks"]))
    verdict = "equivalent: blessed" if result.blessed else "NOT equivalent: not blessed"
    print(f"{verdict}. SavedModel: {serving_dir}")
    for applied in result.report["rewrites"]:
        print(f"Rewrite applied: {applied['kind']} ({len(applied['nodes'])} place(s)): "
              f"{applied['why']}")
    progress("Done")
    return {"blessed": result.blessed, "serving_dir": _shown(serving_dir),
            "max_abs_error": result.report["max_abs_error"],
            "rewrites": [r["kind"] for r in result.report["rewrites"]],
            "converter": result.report["converter"],
            "seconds": result.report["seconds"], "outputs": outputs,
            "_exit": EXIT_OK if result.blessed else EXIT_CHECK_FAILED}


# --------------------------------------------------------------------------- optimize


def cmd_optimize(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.trt_optimizer import detect, optimize

    progress = Progress(3, enabled=not args.quiet)
    found = detect.probe()
    progress("TensorRT: " + ("available, GPU visible" if found.can_run_tensorrt
                             else f"not used ({found.why_not()})"))
    # XLA and TFLite's converter log from C++ straight to fd 2 (I0000 lines): they go
    # to <output>/library.log unless --debug.
    with staging.staged_output(args.output, OPTIMIZE_WRITES, "optimize") as stage, \
            _library_logs(stage, args.debug, LIBRARY_LOG) as logs:
        result = optimize.optimize(args.model, stage, precision=args.precision,
                                   examples_dir=args.examples, atol=args.atol,
                                   topk_threshold=args.topk_threshold,
                                   iterations=args.iterations, probe=found,
                                   candidates=args.candidates.split(",") if args.candidates
                                   else None)
    logs = logs.replace(stage, args.output)
    progress(f"Measured {len(result.report['candidates'])} candidate(s); kept "
             f"{result.report['candidate']} (backend {result.backend})" + logs)
    print(fs.read_text(fs.join(args.output, optimize.REPORT_MD)).rstrip())
    progress("Done")
    return {"blessed": result.blessed, "backend": result.backend,
            "precision": result.precision, "requires_gpu": result.requires_gpu,
            "serving_flags": result.serving_flags,
            "latency_before_ms": result.report["latency_before_ms"],
            "latency_after_ms": result.report["latency_after_ms"],
            "tensorrt_ran": result.report["tensorrt"]["ran"],
            "output": _shown(args.output),
            "_exit": EXIT_OK if result.blessed else EXIT_CHECK_FAILED}


# --------------------------------------------------------------------------- push / rollback


def _model_properties(model_dir: str) -> Dict[str, Any]:
    """Blessing and serving needs from a Model artifact folder's report.json, if any."""
    report = fs.join(model_dir, "report.json")
    if not fs.exists(report):
        return {}
    return json.loads(fs.read_text(report))


def cmd_push(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge import savedmodel
    from tfx_bridge.components.serving_pusher import serving
    from tfx_bridge.components.serving_pusher.errors import PusherConfigError

    saved_model = savedmodel.resolve_saved_model(args.model, PusherConfigError)
    props = _model_properties(args.model)
    blessings = {}
    if "blessed" in props:
        blessings["the model's report"] = 1 if props["blessed"] else 0
    progress = Progress(2, enabled=not args.quiet)
    result = serving.push(saved_model, args.base_path, args.model_name, label=args.label,
                          target=args.target, requires_gpu=bool(props.get("requires_gpu")),
                          serving_flags=props.get("serving_flags") or [],
                          examples_dir=args.examples,
                          allow_contract_change=args.allow_contract_change,
                          keep_versions=args.keep_versions, blessings=blessings,
                          server_base_path=args.server_base_path,
                          lock_timeout_s=args.lock_timeout)
    progress(result.reason)
    print(("Pushed: " if result.pushed else "Not pushed: ") + result.reason)
    progress("Done")
    return {"pushed": result.pushed, "version": result.version,
            "destination": result.destination, "reason": result.reason,
            "labels": result.details.get("labels"),
            "_exit": EXIT_OK if result.pushed else EXIT_CHECK_FAILED}


def cmd_rollback(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.serving_pusher import serving

    labels = serving.rollback(args.base_path, args.model_name, args.to,
                              server_base_path=args.server_base_path)
    print(f"{args.model_name}: stable -> version {labels['stable']}; labels {labels}")
    return {"model_name": args.model_name, "labels": labels}


# --------------------------------------------------------------------------- demo


def _print_run_summary(result: Dict[str, Any]) -> None:
    guard = result["schema_guard"]
    print(f"Span: {result['span']}")
    verdict = ("clean (blessed)" if guard["blessed"] == 1
               else f"NOT blessed ({guard['findings']} findings)")
    print(f"SchemaGuard: {verdict}")
    training = result.get("training")
    if training:
        auc = training["eval_auc"]
        how = ("trained" if training["retrained"] == 1
               else "not retrained (the served model was trained on this span)")
        start = (f", warm start from {training['warm_started_from']}"
                 if training["warm_started_from"] else "")
        print(f"PyTorchTrainer: {how}{start}; eval AUC "
              f"{'not measured' if auc is None else format(auc, '.4f')}")
    error = result["conversion"]["max_abs_error"]
    error_text = "not measured" if error is None else format(error, ".3g")
    print(f"Conversion: max abs error {error_text} "
          f"({'equivalent' if result['conversion']['blessed'] == 1 else 'NOT equivalent'})")
    opt = result["optimizer"]
    print(f"Optimizer: backend {opt['backend']}, p50 {opt['latency_p50_ms_before']:.3f} ms -> "
          f"{opt['latency_p50_ms_after']:.3f} ms (largest batch)"
          + (f", needs {opt['serving_flags']}" if opt["serving_flags"] else ""))
    if result["pushed"]:
        print(f"Pushed: version {result['pushed_version']} at {result['pushed_path']}"
              + ("" if result["new_push"] else " (unchanged: no new version)"))
        raw = result.get("prediction_input") or {}
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(raw.items()))
        print(f"Prediction of the pushed model on one raw eval record ({shown}): "
              f"{result['prediction']}")
    else:
        print(f"Not pushed: {result['push_reason']}")
    print(f"Served versions: {result['served_versions']}")


def cmd_demo(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.pipelines import demo_data, runner
    from tfx_bridge.pipelines import pipeline as pipelines

    workdir = _shown(args.workdir)
    # Data, research output, pipeline root and serving base path: under --object-root
    # when given (s3://, as on Kubeflow), else in the workdir; MLMD stays local.
    root = args.object_root.rstrip("/") if args.object_root else workdir
    data_root = fs.join(root, "data")
    pipeline_root = fs.join(root, runner.PIPELINE_ROOT_DIR)
    serving_base = fs.join(root, runner.SERVING_DIR)
    beam = _object_store_run([root, serving_base])
    progress = Progress(4 if args.hand_over else 3, enabled=not args.quiet)
    folders = demo_data.write_demo_spans(data_root, spans=range(1, args.spans + 1),
                                         rows_per_span=args.rows)
    progress(f"Generated {args.spans} span(s) x {args.rows} rows under {data_root}")
    if args.hand_over:
        from tfx_bridge.pipelines import train_demo_model

        research = fs.join(root, runner.RESEARCH_DIR, fs.basename(folders[-1]))
        card = train_demo_model.train(folders[-1], research, steps=args.train_steps)
        progress(f"Trained the demo CtrMoE model outside the pipeline ({card['steps']} "
                 f"steps, loss {card['final_loss']}) into {research}")
        options: Dict[str, Any] = {}
        chain = "PyTorchModelImporter (hand-over)"
    else:
        research = None
        options = {"preprocessing_module": pipelines.DEMO_PREPROCESSING,
                   "trainer_module": pipelines.DEMO_TRAINER, "train_steps": args.train_steps}
        chain = "Transform -> PyTorchTrainer -> PyTorchModelImporter"
    with _library_logs(workdir, args.debug) as logs:
        result = runner.run_full(workdir, data_root, research, serving_base,
                                 beam_pipeline_args=beam, pipeline_root=pipeline_root,
                                 **options)
    progress("Ran ParquetExampleGen -> StatisticsGen -> ImportSchemaGen -> SchemaGuard -> "
             f"{chain} -> TrtOptimizer -> Evaluator -> ServingPusher" + logs)
    _print_run_summary(result)
    progress("Done")
    result["data_root"] = data_root
    result["_exit"] = EXIT_OK if result["pushed"] else EXIT_CHECK_FAILED
    return result


def cmd_compile_kfp(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.kubeflow import compile as kfp_compile

    path = kfp_compile.compile_pipeline(
        args.output, args.pipeline_root, args.data_root, args.model_source,
        args.serving_base_path, image=args.image,
        contract_path=args.contract, schema_path=args.schema,
        evaluate=not args.no_evaluate, optimizer_iterations=args.optimizer_iterations,
        **_mode_options(args))
    print(f"Wrote {path}")
    return {"output": path, "image": args.image}


def _object_store_run(paths: List[str]) -> Optional[List[str]]:
    """For a pipeline run touching ``s3://``: tensorflow-io registered for the stock
    components, and Beam's s3 options (from the AWS variables); None otherwise.
    The last of ``paths`` is the serving base path."""
    from tfx_bridge.components.serving_pusher import serving
    from tfx_bridge.pipelines import beam_args

    # A serving base path the pusher refuses (gs://) or cannot reach stops the run now,
    # not after the pipeline's other components have run.
    serving.check_base_path(paths[-1])
    if not objectstore.uses_s3(paths):
        return None
    objectstore.enable_tfio()
    return beam_args.object_store_args(paths)


def _mode_options(args: argparse.Namespace) -> Dict[str, Any]:
    """Train in the pipeline (no --model-source: Transform + PyTorchTrainer with the
    given or demo modules), or hand over weights (--model-source; Transform only
    with --preprocessing-module, its graph from --transform-source if given)."""
    from tfx_bridge.pipelines import pipeline as pipelines

    if args.model_source is None:
        if args.transform_source:
            raise UsageError("--transform-source is for hand-over mode: give --model-source.")
        return {"preprocessing_module": args.preprocessing_module
                or pipelines.DEMO_PREPROCESSING,
                "trainer_module": args.trainer_module or pipelines.DEMO_TRAINER,
                "train_steps": args.train_steps}
    if args.trainer_module:
        raise UsageError("--trainer-module trains in the pipeline; --model-source hands "
                         "over weights: give one of them.")
    if args.transform_source and not args.preprocessing_module:
        raise UsageError("--transform-source needs --preprocessing-module (the "
                         "preprocessing_fn the transform graph was made with).")
    return {"preprocessing_module": args.preprocessing_module,
            "transform_source": args.transform_source}


def cmd_run(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.pipelines import runner

    progress = Progress(2, enabled=not args.quiet)
    workdir = _shown(args.workdir)
    pipeline_root = args.pipeline_root or os.path.join(workdir, runner.PIPELINE_ROOT_DIR)
    options = _mode_options(args)
    beam = _object_store_run([args.data_root, *([args.model_source] if args.model_source
                                                else []), pipeline_root,
                              args.serving_base_path])
    model_source, note = runner.check_run_inputs(args.data_root, args.model_source)
    if note and not args.quiet:
        print(note, file=sys.stderr)
    with _library_logs(workdir, args.debug) as logs:
        result = runner.run_full(workdir, args.data_root, model_source,
                                 args.serving_base_path, model_name=args.model_name,
                                 evaluate=not args.no_evaluate, beam_pipeline_args=beam,
                                 pipeline_root=pipeline_root, **options)
    progress("Pipeline run finished" + logs)
    _print_run_summary(result)
    progress("Done")
    return result


# --------------------------------------------------------------------------- main


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print a one-line JSON summary as the last stdout line")
    p.add_argument("--debug", action="store_true", help="show tracebacks and library logs")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _add_mode(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-source", default=None,
                   help="hand-over mode: research output folder with weights.pt, or a root "
                        "of span-N/weights.pt folders (the newest is taken); default: "
                        "train in the pipeline")
    p.add_argument("--preprocessing-module", default=None,
                   help="Transform's preprocessing_fn: pkg.mod.preprocessing_fn or a .py "
                        "module file (default when training: the demo's)")
    p.add_argument("--trainer-module", default=None,
                   help="PyTorchTrainer's run_fn: pkg.mod.run_fn or a .py module file "
                        "(default: the demo's)")
    p.add_argument("--train-steps", type=_positive_int, default=DEFAULT_TRAIN_STEPS,
                   help="PyTorchTrainer steps (train_args.num_steps)")
    p.add_argument("--transform-source", default=None,
                   help="hand-over mode: the TransformGraph folder the weights were trained "
                        "on (default: the pipeline's own Transform)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tfx-bridge",
        description="TFX components that carry PyTorch models into TF Serving.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True

    demo = sub.add_parser("demo", help="run the pipeline on generated demo data")
    demo.add_argument("--workdir", default=DEFAULT_DEMO_DIR,
                      help=f"where data, artifacts and MLMD go (default ./{DEFAULT_DEMO_DIR})")
    demo.add_argument("--spans", type=_positive_int, default=2, help="span folders to generate")
    demo.add_argument("--rows", type=_positive_int, default=3000, help="rows per span")
    demo.add_argument("--train-steps", type=_positive_int, default=DEFAULT_TRAIN_STEPS,
                      help="training steps (fixed with the seed: a rerun trains nothing new)")
    demo.add_argument("--hand-over", action="store_true",
                      help="research hand-over mode: train outside the pipeline and import "
                           "the weights folder (default: Transform + PyTorchTrainer)")
    demo.add_argument("--object-root", default=None,
                      help="s3:// URI for the data, research output, pipeline root and "
                           "serving base path (as on Kubeflow); MLMD stays in --workdir")
    _add_common(demo)
    demo.set_defaults(func=cmd_demo)

    kfp_p = sub.add_parser("compile-kfp", help="compile the pipeline for Kubeflow Pipelines")
    kfp_p.add_argument("--output", required=True, help="pipeline JSON (or .yaml) to write")
    kfp_p.add_argument("--pipeline-root", default="gs://CHANGE-ME/tfx-bridge/root")
    kfp_p.add_argument("--data-root", default="gs://CHANGE-ME/tfx-bridge/data")
    _add_mode(kfp_p)
    kfp_p.add_argument("--no-evaluate", action="store_true", help="leave out the Evaluator gate")
    kfp_p.add_argument("--optimizer-iterations", type=_positive_int, default=50,
                       help="TrtOptimizer's timed calls per candidate and batch size")
    kfp_p.add_argument("--serving-base-path", default="/models")
    kfp_p.add_argument("--image", default="tfx-bridge:0.1.0",
                       help="component image built from kubeflow/Dockerfile")
    kfp_p.add_argument("--schema", default=IMAGE_SCHEMAS + "demo.schema.pbtxt",
                       help="schema for ImportSchemaGen, as the container sees it")
    kfp_p.add_argument("--contract", default=IMAGE_SCHEMAS + "demo.contract.yaml",
                       help="consumer contract for SchemaGuard, as the container sees it")
    _add_common(kfp_p)
    kfp_p.set_defaults(func=cmd_compile_kfp)

    run = sub.add_parser("run", help="run the pipeline once on the newest span (cron, KFP "
                                     "schedule)")
    run.add_argument("--data-root", required=True, help="folder with span-<n>/ Parquet folders")
    _add_mode(run)
    run.add_argument("--serving-base-path", required=True)
    run.add_argument("--model-name", default="ctr")
    run.add_argument("--workdir", required=True,
                     help="MLMD and the log live here (and the pipeline root, by default)")
    run.add_argument("--pipeline-root", default=None,
                     help="where artifacts go (local, s3:// or gs://; default "
                          "<workdir>/pipeline_root)")
    run.add_argument("--no-evaluate", action="store_true", help="skip the Evaluator gate")
    _add_common(run)
    run.set_defaults(func=cmd_run)

    ingest = sub.add_parser(
        "ingest", help="Parquet -> Examples layout (Split-*/ gzip TFRecords) on DirectRunner")
    ingest.add_argument("--input-base", required=True, help="folder holding the Parquet files")
    ingest.add_argument("--output", required=True, help="folder for Split-*/ and sidecar")
    ingest.add_argument("--pattern", default="*.parquet",
                        help="glob relative to --input-base (default *.parquet)")
    ingest.add_argument("--columns", default=None, help="comma-separated columns to read")
    ingest.add_argument("--splits", default="train:2,eval:1",
                        help="output splits as name:hash_buckets (default train:2,eval:1)")
    ingest.add_argument("--partition-feature", default=None,
                        help="hash this column instead of the whole record")
    ingest.add_argument("--batch-size", type=_positive_int, default=20_000,
                        help="rows per Arrow batch")
    ingest.add_argument("--workers", type=_positive_int, default=None,
                        help="DirectRunner processes (default: in-process)")
    _add_common(ingest)
    ingest.set_defaults(func=cmd_ingest)
    validate = sub.add_parser(
        "validate", help="SchemaGuard: check Examples against a schema and a consumer contract")
    validate.add_argument("--examples", required=True,
                          help="Examples folder (Split-*/ gzip TFRecords)")
    validate.add_argument("--schema", required=True, help="TFMD Schema text proto")
    validate.add_argument("--model", default=None,
                          help="SavedModel (or Model artifact) whose serving_default is the "
                          "consumer contract")
    validate.add_argument("--contract", default=None, help="contract file (YAML), see schemas/")
    validate.add_argument("--max-record-mb", type=_positive_int, default=64,
                          help="refuse a record larger than this (default 64)")
    validate.add_argument("--output", required=True,
                          help="folder for Split-*/SchemaDiff.pb and the reports")
    _add_common(validate)
    validate.set_defaults(func=cmd_validate)
    imp = sub.add_parser("import-model",
                         help="PyTorch/ONNX -> SavedModel with a named signature, proven equal")
    imp.add_argument("--torchscript", default=None, help="a TorchScript file")
    imp.add_argument("--state-dict", default=None,
                     help="a state_dict file (loaded with weights_only=True)")
    imp.add_argument("--module-class", default=None, help="pkg.module:Class for --state-dict")
    imp.add_argument("--module-kwargs", default=None, help="JSON constructor kwargs")
    imp.add_argument("--onnx", default=None, help="an ONNX file")
    imp.add_argument("--source-model", default=None,
                     help="a Model folder holding Format-PyTorch/ (PyTorchTrainer's output): "
                     "class, kwargs, inputs and outputs come from its spec")
    imp.add_argument("--input", action="append",
                     help="name:dtype:shape[:lo..hi], repeatable, in forward() order, "
                     "e.g. user_id:int64:-1:0..49999 or image:float32:-1,3,224,224")
    imp.add_argument("--output-name", action="append",
                     help="output name, repeatable, in the model's output order")
    imp.add_argument("--output", required=True,
                     help="Model artifact folder (gets Format-Serving/ and the report)")
    imp.add_argument("--opset", type=int, default=17)
    imp.add_argument("--atol", type=float, default=1e-4)
    imp.add_argument("--rtol", type=float, default=0.0)
    imp.add_argument("--examples", default=None,
                     help="Examples folder: check with real inputs instead of random ones")
    imp.add_argument("--schema", default=None,
                     help="schema the tf.Example signature must agree with")
    imp.add_argument("--converter", choices=("auto", "tfx-bridge", "onnx2tf"), default="auto",
                     help="ONNX -> TF converter: tfx-bridge (ours, op by op in ONNX semantics), "
                     "onnx2tf, or auto (default: ours, onnx2tf where ours refuses)")
    imp.add_argument("--no-graph-rewrites", action="store_true",
                     help="give onnx2tf the ONNX as exported (to see what the rewrites fix)")
    _add_common(imp)
    imp.set_defaults(func=cmd_import_model)
    opt = sub.add_parser("optimize", help="TrtOptimizer: TF-TRT, or the measured CPU path")
    opt.add_argument("--model", required=True,
                     help="a SavedModel folder or a Model artifact folder (Format-Serving/)")
    opt.add_argument("--output", required=True, help="Model artifact folder for the result")
    opt.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "int8"])
    opt.add_argument("--examples", default=None,
                     help="Examples folder for representative and held-out inputs")
    opt.add_argument("--atol", type=float, default=1e-4)
    opt.add_argument("--topk-threshold", type=float, default=1.0,
                     help="minimum top-k index agreement for integer outputs (1.0 = exact)")
    opt.add_argument("--iterations", type=_positive_int, default=100,
                     help="timed calls per batch size")
    opt.add_argument("--candidates", default=None,
                     help="CPU candidates to try, comma-separated, of xla-cpu,xla-frozen,"
                          "frozen,tflite (default: frozen, the ones stock TF Serving serves "
                          "without experimental flags; xla-* need "
                          "--xla_cpu_compilation_enabled, tflite --prefer_tflite_model)")
    _add_common(opt)
    opt.set_defaults(func=cmd_optimize)
    psh = sub.add_parser("push", help="ServingPusher: validated, atomic push to TF Serving")
    psh.add_argument("--model", required=True, help="SavedModel or Model artifact folder")
    psh.add_argument("--base-path", required=True, help="TF Serving model base path")
    psh.add_argument("--model-name", required=True)
    psh.add_argument("--label", default="stable", choices=["stable", "canary"])
    psh.add_argument("--target", default="cpu", choices=["cpu", "gpu"])
    psh.add_argument("--examples", default=None, help="Examples folder for warmup requests")
    psh.add_argument("--allow-contract-change", action="store_true",
                     help="push even if inputs/outputs differ from the served version")
    psh.add_argument("--keep-versions", type=_positive_int, default=5)
    psh.add_argument("--server-base-path", default="/models",
                     help="where the server sees --base-path (models.config and the manifest's "
                          "mount use it; default /models)")
    psh.add_argument("--lock-timeout", type=float, default=600.0,
                     help="seconds to wait for another push's lock before exit 4 (busy)")
    _add_common(psh)
    psh.set_defaults(func=cmd_push)

    rb = sub.add_parser("rollback", help="move the stable label back to a pushed version")
    rb.add_argument("--base-path", required=True)
    rb.add_argument("--model-name", required=True)
    rb.add_argument("--to", type=int, required=True, help="version to serve as stable")
    rb.add_argument("--server-base-path", default="/models",
                    help="where the server sees --base-path (default /models)")
    _add_common(rb)
    rb.set_defaults(func=cmd_rollback)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    _Parser.json_requested = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not args.debug:
        _quiet_libraries()
    logging.basicConfig(level=logging.INFO if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tfx_bridge.errors import BridgeError, Busy, CheckFailed

    try:
        summary = args.func(args)
        code = summary.pop("_exit", EXIT_OK) if isinstance(summary, dict) else EXIT_OK
    except Busy as e:
        if args.debug:
            raise
        print(f"tfx-bridge {args.verb}: busy, retry later: {e}", file=sys.stderr)
        summary, code = {"error": str(e), "error_type": type(e).__name__}, EXIT_BUSY
    except CheckFailed as e:
        if args.debug:
            raise
        print(f"tfx-bridge {args.verb}: {e}", file=sys.stderr)
        summary, code = {"error": str(e), "error_type": type(e).__name__}, EXIT_CHECK_FAILED
    except BridgeError as e:
        if args.debug:
            raise
        print(f"tfx-bridge {args.verb}: {e}", file=sys.stderr)
        summary, code = {"error": str(e), "error_type": type(e).__name__}, EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"tfx-bridge {args.verb}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: say so in one line, keep the traceback for --debug
        if args.debug:
            raise
        print(f"tfx-bridge {args.verb}: internal error: {type(e).__name__}: {e} "
              "(rerun with --debug for the traceback, and please report it)", file=sys.stderr)
        summary, code = {"error": str(e), "error_type": type(e).__name__}, EXIT_INTERNAL
    if args.json:
        summary = {"verb": args.verb, "ok": code == EXIT_OK, "exit_code": code, **summary}
        print(json.dumps(summary, sort_keys=True, default=str))
    return code


def entry(argv: Optional[List[str]] = None) -> None:
    """The ``tfx-bridge`` console script: :func:`main`, then the exit. A run that
    registered tensorflow-io's s3 filesystem ends without C++ teardown, which
    tensorflow-io 0.37.1 aborts (exit 134 for a run that succeeded)."""
    try:
        code = main(argv)
    except BaseException:  # --debug re-raises: print it as Python would, then exit 1
        if not objectstore.tfio_enabled():
            raise
        import traceback

        traceback.print_exc()
        objectstore.exit_now(1)
    if objectstore.tfio_enabled():
        objectstore.exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
