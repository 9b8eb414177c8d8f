"""``demo``, ``run`` (the whole pipeline, locally) and ``compile-kfp`` (Kubeflow
Pipelines V2)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, Optional, Tuple

from tfx_bridge.cli import run_env
from tfx_bridge.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    UsageError,
    add_common,
    int_between,
    library_logs,
    library_side_effects,
    positive_int,
    shown,
)
from tfx_bridge.components.serving_pusher.base_layout import SERVER_MOUNT
from tfx_bridge.pipelines.config import DEMO_ROWS_PER_SPAN, DEMO_SPANS, PipelineConfig
from tfx_bridge.storage import fs

DEFAULT_DEMO_DIR = "demo_output"
DEFAULTS = PipelineConfig.defaults()  # every run-level option's default, declared there


def cmd_demo(args: argparse.Namespace) -> Dict[str, Any]:
    config = PipelineConfig(train_steps=args.train_steps,  # checked before the slow imports
                            optimizer_iterations=args.optimizer_iterations,
                            lock_timeout_s=args.lock_timeout)
    workdir = shown(args.workdir)
    waited = run_env.wait_for_workdir(workdir, config.lock_timeout_s)
    run_env.loading(args)
    from tfx_bridge.pipelines import runner

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
    settings = run_env.beam_settings(args)
    beam = run_env.object_store_run([root, serving_base])
    with run_env.run_lock(args, workdir, max(0.0, config.lock_timeout_s - waited)), \
            run_env.run_lock(args, serving_base, config.lock_timeout_s, config.model_name):
        return _demo(args, config, workdir, root, data_root, pipeline_root, serving_base,
                     (settings, beam))


def _demo(args: argparse.Namespace, config: PipelineConfig, workdir: str, root: str,
          data_root: str, pipeline_root: str, serving_base: str, beam_run) -> Dict[str, Any]:
    from tfx_bridge.pipelines import demo_data, runner

    progress = Progress(4 if args.hand_over else 3, enabled=not args.quiet)
    folders = demo_data.write_demo_spans(data_root, spans=range(1, args.spans + 1),
                                         rows_per_span=args.rows)
    progress(f"Generated {args.spans} span(s) x {args.rows} rows under {data_root}")
    if args.hand_over:
        from tfx_bridge.pipelines import train_demo_model

        research = fs.join(root, runner.RESEARCH_DIR, fs.basename(folders[-1]))
        card = train_demo_model.train(folders[-1], research, steps=config.train_steps)
        progress(f"Trained the demo CtrMoE model outside the pipeline ({card['steps']} "
                 f"steps, loss {card['final_loss']}) into {research}")
        chain = "PyTorchModelImporter (hand-over)"
    else:
        research = None
        chain = "Transform -> PyTorchTrainer -> PyTorchModelImporter"
    with run_env.beam_args(args, beam_run[0], workdir, beam_run[1]) as beam, \
            run_env.watched(args, workdir), library_logs(workdir, args.debug) as logs:
        result = runner.run_full(workdir, data_root, research, serving_base, config,
                                 beam_pipeline_args=beam, pipeline_root=pipeline_root)
    progress("Ran ParquetExampleGen -> StatisticsGen -> ImportSchemaGen -> SchemaGuard -> "
             f"{chain} -> TrtOptimizer -> Evaluator -> ServingPusher" + logs)
    run_env.print_run_summary(result)
    progress("Done")
    result["data_root"] = data_root
    result["_exit"] = EXIT_OK if result["pushed"] else EXIT_CHECK_FAILED
    return result


def cmd_compile_kfp(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.kubeflow import compile as kfp_compile

    progress = Progress(3, enabled=not args.quiet)
    progress(f"Compiling the pipeline for Kubeflow Pipelines V2 into {args.output} (TFX "
             "loads first: some seconds)")
    config, transform_source = _mode_config(args)
    settings = run_env.beam_settings(args)
    if settings.local_portable:
        raise UsageError("compile-kfp --beam-runner portable: give the cluster's "
                         "--job-endpoint and --environment-config (a Kubeflow task cannot "
                         "start local Beam services for the others).")
    # A .py module file is packaged from this machine: check it now. A dotted path may
    # name a package only the image holds, so it is the tasks' to import.
    _check_user_modules(config, files_only=True)

    with library_side_effects():  # a module file's wheel is built here
        path = kfp_compile.compile_pipeline(
            args.output, args.pipeline_root, args.data_root, args.model_source,
            args.serving_base_path, config, image=args.image,
            contract_path=args.contract, schema_path=args.schema,
            transform_source=transform_source, beam_runner=settings)
    progress(f"Built the pipeline ({'hand-over' if args.model_source else 'training'} "
             f"mode) and compiled it with KubeflowV2DagRunner for image {args.image}")
    print(f"Wrote {path}")
    progress("Done")
    return {"output": path, "image": args.image}


def _mode_config(args: argparse.Namespace) -> Tuple[PipelineConfig, Optional[str]]:
    """The run's PipelineConfig from its options, and the hand-over's transform source.
    Train in the pipeline (no --model-source: Transform + PyTorchTrainer with the
    given or demo modules), or hand over weights (--model-source; Transform only
    with --preprocessing-module, its graph from --transform-source if given)."""
    if args.model_source is None:
        if args.transform_source:
            raise UsageError("--transform-source is for hand-over mode: give --model-source.")
    elif args.trainer_workers is not None:
        raise UsageError("--trainer-workers trains in the pipeline; --model-source hands "
                         "over weights: give one of them.")
    elif args.trainer_module:
        raise UsageError("--trainer-module trains in the pipeline; --model-source hands "
                         "over weights: give one of them.")
    elif args.transform_source and not args.preprocessing_module:
        raise UsageError("--transform-source needs --preprocessing-module (the "
                         "preprocessing_fn the transform graph was made with).")
    config = PipelineConfig(
        model_name=getattr(args, "model_name", DEFAULTS.model_name),
        preprocessing_module=args.preprocessing_module, trainer_module=args.trainer_module,
        train_steps=args.train_steps, evaluate=not args.no_evaluate,
        optimizer_iterations=args.optimizer_iterations,
        lock_timeout_s=getattr(args, "lock_timeout", DEFAULTS.lock_timeout_s),
        # PyTorchTrainer: torch.distributed ranks
        custom_config=None if args.trainer_workers is None
        else {"num_workers": args.trainer_workers})
    from tfx_bridge.pipelines import pipeline as pipelines  # TFX: after the checks

    return pipelines.with_demo_modules(config, args.model_source), args.transform_source


def _check_user_modules(config: PipelineConfig, files_only: bool = False) -> None:
    """Every run imports the user's functions before the pipeline starts (see
    pipelines/user_modules.py): TFX would find a typo minutes in, or, on an unchanged
    span, not at all until the next new one. ``files_only``: only module files (.py),
    which compile-kfp packages from this machine; a dotted path may name a package
    only the image holds."""
    from tfx_bridge.pipelines.user_modules import check_user_function

    for module, function, flag in ((config.preprocessing_module, "preprocessing_fn",
                                    "--preprocessing-module"),
                                   (config.trainer_module, "run_fn", "--trainer-module")):
        if module and (module.endswith(".py") or not files_only):
            check_user_function(module, function, flag)


def cmd_run(args: argparse.Namespace) -> Dict[str, Any]:
    workdir = shown(args.workdir)
    waited = run_env.wait_for_workdir(workdir, args.lock_timeout)
    run_env.loading(args)
    from tfx_bridge.pipelines import runner

    progress = Progress(2, enabled=not args.quiet)
    pipeline_root = args.pipeline_root or os.path.join(workdir, runner.PIPELINE_ROOT_DIR)
    config, transform_source = _mode_config(args)
    settings = run_env.beam_settings(args)
    beam = (settings, run_env.object_store_run([args.data_root, *([args.model_source]
                                                           if args.model_source else []),
                                         pipeline_root, args.serving_base_path]))
    # Read-only checks of the inputs first: a refused run creates no folder here (past
    # them, the workdir holds its lock file, and the serving base path only past the
    # user modules' check).
    model_source, note = runner.check_run_inputs(args.data_root, args.model_source)
    # A busy workdir is refused before the user's imports.
    with run_env.run_lock(args, workdir, max(0.0, config.lock_timeout_s - waited)):
        _check_user_modules(config)
        with run_env.run_lock(args, args.serving_base_path, config.lock_timeout_s,
                              config.model_name):
            return _run(args, config, transform_source, workdir, pipeline_root, beam,
                        progress, model_source, note)


def _run(args: argparse.Namespace, config: PipelineConfig, transform_source: Optional[str],
         workdir: str, pipeline_root: str, beam, progress, model_source: Optional[str],
         note: Optional[str]) -> Dict[str, Any]:
    from tfx_bridge.pipelines import runner

    if note and not args.quiet:
        print(note, file=sys.stderr)
    with run_env.beam_args(args, beam[0], workdir, beam[1]) as beam_args, \
            run_env.watched(args, workdir), library_logs(workdir, args.debug) as logs:
        result = runner.run_full(workdir, args.data_root, model_source,
                                 args.serving_base_path, config, beam_pipeline_args=beam_args,
                                 pipeline_root=pipeline_root, transform_source=transform_source)
    progress("Pipeline run finished" + logs)
    run_env.print_run_summary(result)
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
    p.add_argument("--train-steps", type=positive_int, default=DEFAULTS.train_steps,
                   help="PyTorchTrainer steps (train_args.num_steps)")
    p.add_argument("--trainer-workers", type=positive_int, default=None,
                   help="PyTorchTrainer processes under torch.distributed (gloo on CPU, "
                        "nccl with CUDA); default 1")
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


def _add_beam(p: argparse.ArgumentParser) -> None:
    from tfx_bridge.beam_runners import RUNNERS, BeamSettings

    p.add_argument("--beam-runner", choices=RUNNERS, default=BeamSettings.runner,
                   help="where the Beam steps run (ExampleGen, StatisticsGen, SchemaGuard, "
                        "Transform, Evaluator); portable without --job-endpoint starts a "
                        "local job service and worker pool")
    p.add_argument("--beam-arg", action="append", default=[], metavar="ARG",
                   help="a Beam pipeline option passed through, e.g. "
                        "--beam-arg=--flink_master=flink:8081 (repeatable)")
    p.add_argument("--beam-workers", type=positive_int, default=None,
                   help="direct: processes; portable: SDK workers")
    p.add_argument("--job-endpoint", default=None, metavar="HOST:PORT",
                   help="portable: a cluster's Beam job service")
    p.add_argument("--environment-config", default=None, metavar="HOST:PORT",
                   help="portable: the cluster's external SDK worker pool")


def _add_lock_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lock-timeout", type=_seconds, default=DEFAULTS.lock_timeout_s,
                   help="seconds to wait for another run of this workdir or served model "
                        "before exit 4 (busy); default: refuse at once")


def _add_optimizer_iterations(p: argparse.ArgumentParser) -> None:
    from tfx_bridge.components.trt_optimizer.config import MAX_ITERATIONS, MIN_ITERATIONS

    p.add_argument("--optimizer-iterations", type=int_between(MIN_ITERATIONS, MAX_ITERATIONS),
                   default=DEFAULTS.optimizer_iterations,
                   help="TrtOptimizer's most timed calls per candidate and batch size (its "
                        "time budget sizes them within that)")


def add_parser(sub) -> None:
    """The demo, compile-kfp and run verbs."""
    from tfx_bridge.kubeflow import compile as kfp_compile

    demo = sub.add_parser("demo", help="run the pipeline on generated demo data")
    demo.add_argument("--workdir", default=DEFAULT_DEMO_DIR,
                      help=f"where data, artifacts and MLMD go (default ./{DEFAULT_DEMO_DIR})")
    demo.add_argument("--spans", type=positive_int, default=DEMO_SPANS,
                      help="span folders to generate")
    demo.add_argument("--rows", type=positive_int, default=DEMO_ROWS_PER_SPAN,
                      help="rows per span")
    demo.add_argument("--train-steps", type=positive_int, default=DEFAULTS.train_steps,
                      help="training steps (fixed with the seed: a rerun trains nothing new)")
    _add_optimizer_iterations(demo)
    demo.add_argument("--hand-over", action="store_true",
                      help="research hand-over mode: train outside the pipeline and import "
                           "the weights folder (default: Transform + PyTorchTrainer)")
    demo.add_argument("--object-root", default=None,
                      help="s3:// URI for the data, research output, pipeline root and "
                           "serving base path (as on Kubeflow); MLMD stays in --workdir")
    _add_lock_timeout(demo)
    _add_beam(demo)
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
    _add_beam(kfp_p)
    _add_optimizer_iterations(kfp_p)
    kfp_p.add_argument("--serving-base-path", default=SERVER_MOUNT,
                       help=f"where the serving pods mount the models (default {SERVER_MOUNT})")
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
    run.add_argument("--model-name", default=DEFAULTS.model_name)
    run.add_argument("--workdir", required=True,
                     help="MLMD and the log live here (and the pipeline root, by default)")
    run.add_argument("--pipeline-root", default=None,
                     help="where artifacts go (local, s3:// or gs://; default "
                          "<workdir>/pipeline_root)")
    run.add_argument("--no-evaluate", action="store_true", help="skip the Evaluator gate")
    _add_optimizer_iterations(run)
    _add_lock_timeout(run)
    _add_beam(run)
    add_common(run)
    run.set_defaults(func=cmd_run)
