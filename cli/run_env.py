"""What ``demo`` and ``run`` settle around a pipeline run: the run locks, the
Beam runner preset and its services, object-store options, progress lines read
from MLMD, and the summary printed at the end."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Dict, List, Optional

from tfx_bridge.storage import objectstore


def print_run_summary(result: Dict[str, Any]) -> None:
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
    print(optimizer_line(result["optimizer"]))
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


def optimizer_line(opt: Dict[str, Any]) -> str:
    """The optimizer's summary line: never a slower "after" shown as a result. When the
    original is kept it says so, with the reason (the figures the choice refused);
    otherwise before -> after are the same run's interleaved medians."""
    decision = opt.get("decision")
    before, after = opt["latency_p50_ms_before"], opt["latency_p50_ms_after"]
    if opt["backend"] == "original":
        reason = decision or "kept the original"
        figure = "" if before is None else f"; p50 {before:.3f} ms (largest batch)"
        return f"Optimizer: {reason}{figure}"
    line = (f"Optimizer: backend {opt['backend']}, p50 {before:.3f} ms -> {after:.3f} ms "
            "(largest batch, same-run interleaved medians)")
    if decision:
        line += f"; {decision}"
    return line + (f"; needs {opt['serving_flags']}" if opt["serving_flags"] else "")


def wait_for_workdir(workdir: str, timeout_s: float) -> float:
    """A workdir another run holds is refused (exit 4) before the imports, which take
    many seconds: a scheduled run that finds the last one still going ends at once.
    Returns the seconds waited for it, which the run's lock timeout is reduced by."""
    from tfx_bridge import runlock

    return runlock.wait_while_held(workdir, timeout_s)


@contextlib.contextmanager
def run_lock(args: argparse.Namespace, folder: str, timeout_s: float,
             model_name: Optional[str] = None):
    """The run lock of this pipeline's workdir, or (``model_name``) of the served model
    under a local serving base path: a second run waits up to ``timeout_s`` (the run's
    ``PipelineConfig.lock_timeout_s``, --lock-timeout), then exits 4 naming the holder.
    A run that died holding it is taken over, and said so."""
    from tfx_bridge import runlock
    from tfx_bridge.components.serving_pusher.config import check_model_name

    what, name = "this workdir", runlock.LOCK_FILE
    if model_name is not None:
        check_model_name(model_name)
        what = f"model {model_name!r} under {folder}"
        name = runlock.model_lock_name(model_name)
    with runlock.run_lock(folder, timeout_s, what=what, name=name) as dead:
        if dead is not None and not args.quiet:
            print(f"Took over the run lock of {what} from a run that died holding it "
                  f"({dead.describe()}).", file=sys.stderr)
        yield


@contextlib.contextmanager
def watched(args: argparse.Namespace, workdir: str):
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


def loading(args: argparse.Namespace) -> None:
    """Said before the imports, which take many seconds: a silent start looks hung."""
    if not args.quiet:
        print("Loading TFX, TensorFlow and Beam (some seconds) ...", file=sys.stderr,
              flush=True)


def beam_settings(args: argparse.Namespace):
    """The run's Beam runner preset, checked before anything runs (exit 2)."""
    from tfx_bridge import beam_runners

    return beam_runners.check(beam_runners.BeamSettings(
        args.beam_runner, tuple(args.beam_arg or ()), args.beam_workers, args.job_endpoint,
        args.environment_config))


@contextlib.contextmanager
def beam_args(args: argparse.Namespace, settings, workdir: str,
               object_store: Optional[List[str]]):
    """The Beam options of this run: the runner preset's, then the object stores'.
    A local portable run starts its job service and workers here and stops them
    after the pipeline, saying where their logs are."""
    from tfx_bridge import beam_runners, portable

    def merged(runner_args):
        # The object stores' defaults (the stock SDK image) never replace what the
        # runner preset or the user's --beam-arg named: Beam keeps the last value.
        named = {a.split("=", 1)[0] for a in runner_args if a.startswith("--")}
        return runner_args + [a for a in object_store or []
                              if a.split("=", 1)[0] not in named]

    if not settings.local_portable:
        yield merged(beam_runners.pipeline_args(settings))
        return
    logs = os.path.join(workdir, "beam_logs")
    if not args.quiet:
        print(f"Starting a local Beam job service and worker pool on 127.0.0.1 (logs in "
              f"{logs}) ...", file=sys.stderr, flush=True)
    with portable.local_services(logs) as (job_endpoint, environment_config):
        yield merged(beam_runners.pipeline_args(settings, job_endpoint, environment_config))
    if not args.quiet:
        print(f"Stopped the local Beam services (logs in {logs})", file=sys.stderr)


def object_store_run(paths: List[str]) -> Optional[List[str]]:
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
