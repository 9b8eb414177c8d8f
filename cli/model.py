"""``import-model`` (PyTorchModelImporter's core) and ``optimize`` (TrtOptimizer's)."""
from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Dict

from tfx_bridge import limits
from tfx_bridge.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    LIBRARY_LOG,
    Progress,
    add_common,
    int_between,
    library_logs,
    number_between,
    shown,
)
from tfx_bridge.storage import fs, staging

IMPORT_WRITES = ("Format-Serving", "Format-PyTorch", "report.json", "report.md")
OPTIMIZE_WRITES = ("Format-Serving", "Format-PyTorch", "report.json", "report.md", "latency.png",
                   LIBRARY_LOG)


def _stage_line(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def cmd_import_model(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer import report as import_report
    from tfx_bridge.components.pytorch_model_importer import source as model_source
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError

    chosen = [(k, p) for k, p in (("torchscript", args.torchscript),
                                  ("state_dict", args.state_dict), ("onnx", args.onnx),
                                  ("source_model", args.source_model)) if p]
    if len(chosen) != 1:
        raise ImporterConfigError(
            "Give exactly one of --torchscript FILE, --state-dict FILE (with --module-class), "
            "--onnx FILE, --source-model DIR (a Model folder holding Format-PyTorch/).")
    try:
        kwargs = (limits.loads_json(args.module_kwargs, "--module-kwargs")
                  if args.module_kwargs else None)
    except limits.LimitError:
        raise
    except ValueError as e:
        raise ImporterConfigError(f"--module-kwargs is not JSON: {e}") from e
    if args.source_model and not model_source.has_pytorch_spec(args.source_model):
        raise ImporterConfigError(
            f"--source-model {args.source_model} holds no Format-PyTorch/model_spec.json "
            "(a PyTorchTrainer or importer output); give the model file instead.")
    kind, path = chosen[0] if not args.source_model else (model_source.SOURCE_STATE_DICT, None)
    config = ImporterConfig(  # the component's one config, checked the same way
        source_kind=kind, source_path=path, module_class=args.module_class,
        module_kwargs=kwargs, inputs=args.input or (), output_names=args.output_name or (),
        opset=args.opset, atol=args.atol, rtol=args.rtol, converter=args.converter,
        graph_rewrites=not args.no_graph_rewrites, task=args.task,
        max_detections=args.max_detections)
    problems = config.source_problems(has_source_model=bool(args.source_model))
    if problems:
        raise ImporterConfigError("import-model: " + "; ".join(problems) + ".")
    schema = None
    if args.schema:
        from tfx_bridge.artifacts import schema_file
        schema = schema_file.load_schema(args.schema)
    progress = Progress(2, enabled=not args.quiet)
    with staging.staged_output(args.output, IMPORT_WRITES, "import-model") as stage:
        # The component's source_model route when --source-model: the spec inside decides.
        result = convert.import_model(config, stage, source_model=args.source_model or "",
                                      examples_dir=args.examples, schema=schema,
                                      progress=None if args.quiet else _stage_line)
    source, outputs = result.source, result.output_names
    serving_dir = staging.final_path(result.serving_dir, stage, args.output)
    progress(f"Exported, converted ({result.report['converter']}) and checked {source.kind} "
             f"{source.path} in {sum(result.report['seconds'].values()):.1f}s")
    print(import_report.check_table(result.report["checks"]))
    if result.report.get("summary"):
        print(result.report["summary"])
    verdict = "equivalent: blessed" if result.blessed else "NOT equivalent: not blessed"
    print(f"{verdict}. SavedModel: {serving_dir}")
    cause = import_report.likely_cause(result.report)
    if cause:
        print(f"Likely cause: {cause}")
    for applied in result.report["rewrites"]:
        print(f"Rewrite applied: {applied['kind']} ({len(applied['nodes'])} place(s)): "
              f"{applied['why']}")
    progress("Done")
    return {"blessed": result.blessed, "serving_dir": shown(serving_dir),
            "max_abs_error": result.report["max_abs_error"],
            "rewrites": [r["kind"] for r in result.report["rewrites"]],
            "converter": result.report["converter"],
            "seconds": result.report["seconds"], "outputs": outputs,
            "_exit": EXIT_OK if result.blessed else EXIT_CHECK_FAILED}


def cmd_optimize(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.trt_optimizer import detect, optimize
    from tfx_bridge.components.trt_optimizer.config import OptimizerConfig
    from tfx_bridge.components.trt_optimizer.inputs import resolve_saved_model
    from tfx_bridge.components.trt_optimizer.results import REPORT_MD

    # The settings and the model are checked before the TensorRT probe (seconds).
    config = OptimizerConfig(  # the component's one config, checked the same way
        precision=args.precision, atol=args.atol, topk_threshold=args.topk_threshold,
        iterations=args.iterations, time_budget_s=args.time_budget,
        candidates=tuple(args.candidates.split(",")) if args.candidates else None)
    resolve_saved_model(args.model)
    progress = Progress(3, enabled=not args.quiet)
    found = detect.probe()
    progress("TensorRT: " + ("available, GPU visible" if found.can_run_tensorrt
                             else f"not used ({found.why_not()})"))
    # XLA and TFLite's converter log from C++ straight to fd 2 (I0000 lines): they go
    # to <output>/library.log unless --debug.
    with staging.staged_output(args.output, OPTIMIZE_WRITES, "optimize") as stage, \
            library_logs(stage, args.debug, LIBRARY_LOG) as logs:
        result = optimize.optimize(args.model, stage, config, examples_dir=args.examples,
                                   probe=found)
    logs = logs.replace(stage, args.output)
    progress(f"Measured {len(result.report['candidates'])} candidate(s); "
             f"{result.report['decision']['reason']} (backend {result.backend})" + logs)
    print(fs.read_text(fs.join(args.output, REPORT_MD)).rstrip())
    progress("Done")
    return {"blessed": result.blessed, "backend": result.backend,
            "precision": result.precision, "requires_gpu": result.requires_gpu,
            "serving_flags": result.serving_flags,
            "latency_before_ms": result.report["latency_before_ms"],
            "latency_after_ms": result.report["latency_after_ms"],
            "decision": result.report["decision"]["reason"],
            "session": (result.report.get("session") or {}).get("reason"),
            "tensorrt_ran": result.report["tensorrt"]["ran"],
            "output": shown(args.output),
            "_exit": EXIT_OK if result.blessed else EXIT_CHECK_FAILED}


def add_parser(sub) -> None:
    """The import-model and optimize verbs."""
    from tfx_bridge.components.pytorch_model_importer import detection, to_tf
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.trt_optimizer.config import (
        MAX_ITERATIONS,
        MAX_TIME_BUDGET_S,
        MIN_ITERATIONS,
        MIN_TIME_BUDGET_S,
        OptimizerConfig,
    )
    from tfx_bridge.components.trt_optimizer.results import PRECISIONS

    importer = ImporterConfig()  # the defaults, from the component's one config

    imp = sub.add_parser("import-model",
                         help="PyTorch/ONNX -> SavedModel with a named signature, proven equal")
    imp.add_argument("--torchscript", default=None, help="a TorchScript file")
    imp.add_argument("--state-dict", default=None,
                     help="a state_dict file (loaded with weights_only=True)")
    imp.add_argument("--module-class", default=None,
                     help="pkg.module:Class for --state-dict; with --torchscript and --task "
                     "detection, the module a scripted detector is rebuilt from")
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
    imp.add_argument("--opset", type=int, default=importer.opset)
    imp.add_argument("--atol", type=number_between(0.0, math.inf), default=importer.atol)
    imp.add_argument("--rtol", type=number_between(0.0, math.inf), default=importer.rtol)
    imp.add_argument("--examples", default=None,
                     help="Examples folder: check with real inputs instead of random ones")
    imp.add_argument("--schema", default=None,
                     help="schema the tf.Example signature must agree with")
    imp.add_argument("--converter", choices=to_tf.CHOICES, default=importer.converter,
                     help="ONNX -> TF converter: tfx-bridge (ours, op by op in ONNX semantics), "
                     "onnx2tf, or auto (default: ours, onnx2tf where ours refuses)")
    imp.add_argument("--task", choices=detection.TASKS, default=importer.task,
                     help="tensors (default): the declared inputs and outputs; detection: "
                     "torchvision's detection interface in, the TF Object Detection API's "
                     f"signature out (--input defaults to {detection.DEFAULT_INPUT})")
    imp.add_argument("--max-detections", type=int_between(1, detection.MAX_DETECTIONS),
                     default=None, help="a detector's detections per image when the model "
                     "does not say (an ONNX file); torchvision's default is 100")
    imp.add_argument("--no-graph-rewrites", action="store_true",
                     help="give onnx2tf the ONNX as exported (to see what the rewrites fix)")
    add_common(imp)
    imp.set_defaults(func=cmd_import_model)

    opt = sub.add_parser("optimize", help="TrtOptimizer: TF-TRT, or the measured CPU path")
    opt.add_argument("--model", required=True,
                     help="a SavedModel folder or a Model artifact folder (Format-Serving/)")
    opt.add_argument("--output", required=True, help="Model artifact folder for the result")
    defaults = OptimizerConfig()
    opt.add_argument("--precision", default=defaults.precision, choices=list(PRECISIONS))
    opt.add_argument("--examples", default=None,
                     help="Examples folder for representative and held-out inputs")
    opt.add_argument("--atol", type=number_between(0.0, math.inf), default=defaults.atol)
    opt.add_argument("--topk-threshold", type=number_between(1e-9, 1.0),
                     default=defaults.topk_threshold,
                     help="minimum top-k index agreement for integer outputs (1.0 = exact)")
    opt.add_argument("--iterations", type=int_between(MIN_ITERATIONS, MAX_ITERATIONS),
                     default=defaults.iterations,
                     help="the most timed calls per candidate and batch size")
    opt.add_argument("--time-budget", type=number_between(MIN_TIME_BUDGET_S,
                                                          MAX_TIME_BUDGET_S),
                     default=defaults.time_budget_s, metavar="SECONDS",
                     help="seconds the measuring phase aims to take, every candidate and "
                          "batch size together; calls and rounds are sized to fit it")
    opt.add_argument("--candidates", default=None,
                     help="CPU candidates to try, comma-separated, of xla-cpu,xla-frozen,"
                          "frozen,tflite (default: frozen, the ones stock TF Serving serves "
                          "without experimental flags; xla-* need "
                          "--xla_cpu_compilation_enabled, tflite --prefer_tflite_model)")
    add_common(opt)
    opt.set_defaults(func=cmd_optimize)
