"""``demo``, ``run`` (the whole pipeline, locally) and ``compile-kfp`` (Kubeflow
Pipelines V2)."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Dict, List, Optional

from tfx_bridge.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    UsageError,
    add_common,
    library_logs,
    positive_int,
    shown,
)
from tfx_bridge.storage import fs, objectstore

DEFAULT_DEMO_DIR = "demo_output"
DEFAULT_TRAIN_STEPS = 150


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


@contextlib.contextmanager
def _run_lock(args: argparse.Namespace, folder: str, model_name: Optional[str] = None):
    """The run lock of this pipeline's workdir, or (``model_name``) of the served model
    under a local serving base path: a second run waits up to --lock-timeout, then
    exits 4 naming the holder. A run that died holding it is taken over, and said so."""
    from tfx_bridge import runlock
    from tfx_bridge.components.serving_pusher.config import check_model_name

    what, name = "this workdir", runlock.LOCK_FILE
    if model_name is not None:
        check_model_name(model_name)
        what = f"model {model_name!r} under {folder}"
        name = runlock.model_lock_name(model_name)
    with runlock.run_lock(folder, args.lock_timeout, what=what, name=name) as dead:
        if dead is not None and not args.quiet:
            print(f"Took over the run lock of {what} from a run that died holding it "
                  f"({dead.describe()}).", file=sys.stderr)
        yield


@contextlib.contextmanager
def _watched(args: argparse.Namespace, workdir: str):
    """Around a pipeline run, holding the workdir's lock: executions a killed run left
    RUNNING are marked first, then a line as each component starts and ends, read from
    MLMD (pipelines/run_state.py), written to the terminal's stderr even while fd 2
    goes to the library log. --quiet silences the lines, not the repair."""
    from tfx_bridge.pipelines import run_state, runner

    metadata = os.path.join(workdir, runner.METADATA_FILE)
    repaired = run_state.mark_abandoned(metadata)
    if args.quiet:
        yield
        return
    for line in repaired:
        print(line, file=sys.stderr)
    sys.stderr.flush()
    terminal = os.dup(2)  # before library_logs points fd 2 at the log file

    def say(line: str) -> None:
        os.write(terminal, f"  {line}\n".encode())

    watcher = run_state.Progress(metadata, say)
    try:
        watcher.start()
        yield
    finally:
        try:
            watcher.stop()
        finally:
            os.close(terminal)


def _loading(args: argparse.Namespace) -> None:
    """Said before the imports, which take many seconds: a silent start looks hung."""
    if not args.quiet:
        print("Loading TFX, TensorFlow and Beam (some seconds) ...", file=sys.stderr,
              flush=True)


def cmd_demo(args: argparse.Namespace) -> Dict[str, Any]:
    _loading(args)
    from tfx_bridge.pipelines import runner

    workdir = shown(args.workdir)
    if args.object_root and not fs.is_remote(args.object_root):
        raise UsageError(f"--object-root {args.object_root} is not a URI: give s3://bucket/"
                         "prefix (as on Kubeflow), or leave it out to keep everything in "
                         "--workdir.")
    # Data, research output, pipeline root and serving base path: under --object-root
    # when given (s3://, as on Kubeflow), else in the workdir; MLMD stays local.
    root = args.object_root.rstrip("/") if args.object_root else workdir
    data_root = fs.join(root, "data")
    pipeline_root = fs.join(root, runner.PIPELINE_ROOT_DIR)
    serving_base = fs.join(root, runner.SERVING_DIR)
    beam = _object_store_run([root, serving_base])
    with _run_lock(args, workdir), _run_lock(args, serving_base, "ctr"):
        return _demo(args, workdir, root, data_root, pipeline_root, serving_base, beam)


def _demo(args: argparse.Namespace, workdir: str, root: str, data_root: str,
          pipeline_root: str, serving_base: str, beam) -> Dict[str, Any]:
    from tfx_bridge.pipelines import demo_data, runner
    from tfx_bridge.pipelines import pipeline as pipelines

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
    with _watched(args, workdir), library_logs(workdir, args.debug) as logs:
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

    progress = Progress(3, enabled=not args.quiet)
    progress(f"Compiling the pipeline for Kubeflow Pipelines V2 into {args.output} (TFX "
             "loads first: some seconds)")
    options = _mode_options(args)
    # A .py module file is packaged from this machine: check it now. A dotted path may
    # name a package only the image holds, so it is the tasks' to import.
    _check_user_modules({k: v for k, v in options.items()
                         if isinstance(v, str) and v.endswith(".py")})

    path = kfp_compile.compile_pipeline(
        args.output, args.pipeline_root, args.data_root, args.model_source,
        args.serving_base_path, image=args.image,
        contract_path=args.contract, schema_path=args.schema,
        evaluate=not args.no_evaluate, optimizer_iterations=args.optimizer_iterations,
        **options)
    progress(f"Built the pipeline ({'hand-over' if args.model_source else 'training'} "
             f"mode) and compiled it with KubeflowV2DagRunner for image {args.image}")
    print(f"Wrote {path}")
    progress("Done")
    return {"output": path, "image": args.image}


def _object_store_run(paths: List[str]) -> Optional[List[str]]:
    """For a pipeline run touching ``s3://``: tensorflow-io registered for the stock
    components, and Beam's s3 options (from the AWS variables); None otherwise.
    The last of ``paths`` is the serving base path."""
    from tfx_bridge import beam
    from tfx_bridge.components.serving_pusher import serving

    # A serving base path the pusher refuses (gs://) or cannot reach stops the run now,
    # not after the pipeline's other components have run.
    serving.check_base_path(paths[-1])
    if not objectstore.uses_s3(paths):
        return None
    objectstore.enable_tfio()
    args = beam.object_store_args(paths)
    beam.set_filesystem_options(args)  # the run's checks read span footers before Beam runs
    return args


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


def _check_user_modules(options: Dict[str, Any]) -> None:
    """Every run imports the user's functions before the pipeline starts (see
    pipelines/user_modules.py): TFX would find a typo minutes in, or, on an unchanged
    span, not at all until the next new one."""
    from tfx_bridge.pipelines.user_modules import check_user_function

    for key, function, flag in (("preprocessing_module", "preprocessing_fn",
                                 "--preprocessing-module"),
                                ("trainer_module", "run_fn", "--trainer-module")):
        if options.get(key):
            check_user_function(options[key], function, flag)


def cmd_run(args: argparse.Namespace) -> Dict[str, Any]:
    _loading(args)
    from tfx_bridge.pipelines import runner

    progress = Progress(2, enabled=not args.quiet)
    workdir = shown(args.workdir)
    pipeline_root = args.pipeline_root or os.path.join(workdir, runner.PIPELINE_ROOT_DIR)
    options = _mode_options(args)
    beam = _object_store_run([args.data_root, *([args.model_source] if args.model_source
                                                else []), pipeline_root,
                              args.serving_base_path])
    # Read-only checks of the inputs first: a refused run creates no folder here (past
    # them, the workdir holds its lock file, and the serving base path only past the
    # user modules' check).
    model_source, note = runner.check_run_inputs(args.data_root, args.model_source)
    with _run_lock(args, workdir):  # a busy workdir is refused before the user's imports
        _check_user_modules(options)
        with _run_lock(args, args.serving_base_path, args.model_name):
            return _run(args, workdir, pipeline_root, options, beam, progress, model_source,
                        note)


def _run(args: argparse.Namespace, workdir: str, pipeline_root: str, options, beam,
         progress, model_source: Optional[str], note: Optional[str]) -> Dict[str, Any]:
    from tfx_bridge.pipelines import runner

    if note and not args.quiet:
        print(note, file=sys.stderr)
    with _watched(args, workdir), library_logs(workdir, args.debug) as logs:
        result = runner.run_full(workdir, args.data_root, model_source,
                                 args.serving_base_path, model_name=args.model_name,
                                 evaluate=not args.no_evaluate, beam_pipeline_args=beam,
                                 pipeline_root=pipeline_root,
                                 optimizer_iterations=args.optimizer_iterations, **options)
    progress("Pipeline run finished" + logs)
    _print_run_summary(result)
    progress("Done")
    # As demo: 0 when a version is served (new or unchanged), 1 when a check refused it.
    result["_exit"] = EXIT_OK if result["pushed"] else EXIT_CHECK_FAILED
    return result


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
    p.add_argument("--train-steps", type=positive_int, default=DEFAULT_TRAIN_STEPS,
                   help="PyTorchTrainer steps (train_args.num_steps)")
    p.add_argument("--transform-source", default=None,
                   help="hand-over mode: the TransformGraph folder the weights were trained "
                        "on (default: the pipeline's own Transform)")


def _seconds(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def _add_lock_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lock-timeout", type=_seconds, default=0.0,
                   help="seconds to wait for another run of this workdir or served model "
                        "before exit 4 (busy); default: refuse at once")


def add_parser(sub) -> None:
    """The demo, compile-kfp and run verbs."""
    from tfx_bridge.kubeflow import compile as kfp_compile

    demo = sub.add_parser("demo", help="run the pipeline on generated demo data")
    demo.add_argument("--workdir", default=DEFAULT_DEMO_DIR,
                      help=f"where data, artifacts and MLMD go (default ./{DEFAULT_DEMO_DIR})")
    demo.add_argument("--spans", type=positive_int, default=2, help="span folders to generate")
    demo.add_argument("--rows", type=positive_int, default=3000, help="rows per span")
    demo.add_argument("--train-steps", type=positive_int, default=DEFAULT_TRAIN_STEPS,
                      help="training steps (fixed with the seed: a rerun trains nothing new)")
    demo.add_argument("--hand-over", action="store_true",
                      help="research hand-over mode: train outside the pipeline and import "
                           "the weights folder (default: Transform + PyTorchTrainer)")
    demo.add_argument("--object-root", default=None,
                      help="s3:// URI for the data, research output, pipeline root and "
                           "serving base path (as on Kubeflow); MLMD stays in --workdir")
    _add_lock_timeout(demo)
    add_common(demo)
    demo.set_defaults(func=cmd_demo)

    kfp_p = sub.add_parser("compile-kfp", help="compile the pipeline for Kubeflow Pipelines")
    kfp_p.add_argument("--output", required=True, help="pipeline JSON (or .yaml) to write")
    # No placeholders: a spec compiled against gs://CHANGE-ME would fail on the cluster.
    kfp_p.add_argument("--pipeline-root", required=True,
                       help="where the tasks write artifacts (gs:// or s3://)")
    kfp_p.add_argument("--data-root", required=True,
                       help="the folder with span-<n>/ Parquet folders, as the tasks see it")
    _add_mode(kfp_p)
    kfp_p.add_argument("--no-evaluate", action="store_true", help="leave out the Evaluator gate")
    kfp_p.add_argument("--optimizer-iterations", type=positive_int, default=50,
                       help="TrtOptimizer's timed calls per candidate and batch size")
    kfp_p.add_argument("--serving-base-path", default="/models")
    kfp_p.add_argument("--image", required=True,
                       help="the component image built from kubeflow/Dockerfile and pushed "
                            f"to a registry the cluster pulls from (e.g. "
                            f"gcr.io/PROJECT/{kfp_compile.DEFAULT_IMAGE})")
    kfp_p.add_argument("--schema", default=kfp_compile.IMAGE_SCHEMAS + "demo.schema.pbtxt",
                       help="schema for ImportSchemaGen, as the container sees it")
    kfp_p.add_argument("--contract", default=kfp_compile.IMAGE_SCHEMAS + "demo.contract.yaml",
                       help="consumer contract for SchemaGuard, as the container sees it")
    add_common(kfp_p)
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
    run.add_argument("--optimizer-iterations", type=positive_int, default=50,
                     help="TrtOptimizer's timed calls per candidate and batch size")
    _add_lock_timeout(run)
    add_common(run)
    run.set_defaults(func=cmd_run)
