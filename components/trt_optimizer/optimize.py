"""TrtOptimizer's core: make a SavedModel fast to serve, prove it, never lie about it.

No TFX imports. With TensorRT and a GPU (probed in a subprocess, see
``detect``): TF-TRT in a child process, engines built ahead, validated with
native-segment fallback disabled. Without (CPU hosts, CI): candidates are
built and drift-checked, those that pass are timed against the original in
interleaved rounds sized to the config's time budget, with TF Serving's CPU
kernels (``measure_worker``), and one replaces the original only when it is
at least 5% faster at every batch size beyond the rounds' spread (``decide``);
otherwise the original is kept and the report says why:

  original     the SavedModel as imported
  xla-cpu      serving_default compiled with XLA (jit_compile)
  xla-frozen   variables frozen to constants, then XLA (compiles graphs whose
               shape arguments come from variables, e.g. onnx2tf transposes)
  frozen       variables frozen to constants, Grappler-optimized, no XLA
  tflite       serving_default converted to TFLite (builtin ops, fp32) and
               written as ``model.tflite`` beside the untouched SavedModel

TF Serving runs XLA on CPU only with --xla_cpu_compilation_enabled=true, so an
XLA choice records that flag and keeps ``serving_default_noxla`` beside it.

Both that flag and --prefer_tflite_model are marked "EXPERIMENTAL; CAN BE
REMOVED ANYTIME!" in TF Serving and apply server-wide. So by default only the
candidates stock TF Serving serves without experimental flags are tried
(``frozen``); ``xla-cpu``, ``xla-frozen`` and ``tflite`` are opt-in through
``candidates``, and the report says what each flag costs.

TF Serving serves ``model.tflite`` from a SavedModel folder only with
--prefer_tflite_model=true (marked experimental in TF Serving), through its
TfLiteSession: one single-threaded interpreter per pool, builtin ops only. It
pays off for small models, where TF's per-call Session::Run cost (about 0.25
ms on a 2-core host, whatever the graph) is most of the latency. Under that
flag the server exposes the signatures inside model.tflite: only
serving_default (tf.Example parsing stays in the SavedModel); without the
flag it serves the SavedModel as before. So a TFLite choice records the flag,
and the report says what it serves; ``candidates`` can leave TFLite out for
fleets that do not run experimental flags.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence

from tfx_bridge.artifacts.savedmodel import SERVING_SIGNATURE, TFLITE_FLAG
from tfx_bridge.components.trt_optimizer import decide, measure_worker, session_threads
from tfx_bridge.components.trt_optimizer.candidates import (
    BACKEND,
    DEFAULT_CPU_CANDIDATES,
    convert_tensorrt,
    cpu_builders,
    engines_only,
)
from tfx_bridge.components.trt_optimizer.config import OptimizerConfig
from tfx_bridge.components.trt_optimizer.detect import Probe
from tfx_bridge.components.trt_optimizer.errors import OptimizerConfigError
from tfx_bridge.components.trt_optimizer.inputs import (
    importer_report,
    input_specs,
    representative_inputs,
    resolve_saved_model,
    timing_batches,
)
from tfx_bridge.components.trt_optimizer.measure import (
    drift,
    load_servable,
    measure_budgeted,
    tf_servable,
)
from tfx_bridge.components.trt_optimizer.report import build_report, write_report
from tfx_bridge.components.trt_optimizer.results import (
    BACKEND_ORIGINAL,
    BACKEND_TENSORRT,
    IMPORTER_REPORT,
    NOT_TIMED,
    SERVING_DIR,
    CandidateResult,
    OptimizeResult,
)
from tfx_bridge.errors import short_message
from tfx_bridge.storage import fs
from tfx_bridge.torch import model as torch_model


def optimize(model_path: str, output_dir: str, config: Optional[OptimizerConfig] = None,
             examples_dir: Optional[str] = None, batches: Optional[Sequence[int]] = None,
             probe: Optional[Probe] = None,
             extra_candidates: Optional[Dict[str, Callable]] = None,
             model_dir: Optional[str] = None) -> OptimizeResult:
    """Optimizes ``model_path`` into ``output_dir``, the whole Model artifact; either
    may be a URI. The component's executor and ``tfx-bridge optimize`` both call it.

    ``model_path`` is a SavedModel folder or a Model artifact folder (the
    importer's: ``Format-Serving/`` with its report beside it). The artifact
    written holds ``Format-Serving/``, the report (:func:`optimize_local`) and the
    input's ``Format-PyTorch/`` when it has one: the PyTorch form travels with
    the model, so a blessed optimized model is what the next training warm-starts
    from (docs/ARCHITECTURE.md).

    TF-TRT, XLA and the TFLite converter work on local folders: a remote model
    folder is copied to a local folder first, the output is written locally and
    uploaded when every step has finished, and both copies are removed. The other
    arguments are :func:`optimize_local`'s. ``model_dir`` names the Model folder
    whose report and ``Format-PyTorch/`` go with the SavedModel when ``model_path``
    does not (the executor's artifact, whose SavedModel may sit in another layout).
    """
    source = resolve_saved_model(model_path)  # a clear refusal before anything is copied
    if model_dir is None:
        model_dir = model_folder(model_path, source)
    with _model_locally(source, model_dir) as (local_source, local_model), \
            fs.local_output(output_dir) as local_out:
        result = optimize_local(local_source, local_out, config, examples_dir, batches, probe,
                                extra_candidates)
        if local_model is not None:
            carry_pytorch(local_model, local_out)
    return result


def model_folder(model_path: str, saved_model_dir: str) -> Optional[str]:
    """The Model artifact folder ``model_path`` names (a folder holding
    ``Format-Serving/``, or that folder itself), or None for a SavedModel folder
    that stands alone."""
    path = model_path.rstrip("/")
    if saved_model_dir.rstrip("/") != path:
        return path
    return fs.dirname(path) if fs.basename(path) == SERVING_DIR else None


@contextlib.contextmanager
def _model_locally(saved_model_dir: str, model_dir: Optional[str]) -> Iterator[tuple]:
    """(a local SavedModel, a local Model folder or None): read in place when local
    and laid out as a Model folder (or a SavedModel standing alone), else a local
    copy in the Model layout of what the optimizer reads: the SavedModel as
    ``Format-Serving/`` and, from ``model_dir``, its report (the declared input
    ranges) and ``Format-PyTorch/``. A remote model's other files, or a parent
    folder that is no Model artifact, are never copied."""
    local = not fs.is_remote(saved_model_dir) and (model_dir is None or (
        not fs.is_remote(model_dir)
        and fs.join(model_dir, SERVING_DIR) == saved_model_dir.rstrip("/")))
    if local:
        yield saved_model_dir, model_dir
        return
    work = tempfile.mkdtemp(prefix="tfx-bridge-optimize-in-")
    try:
        fs.copy_tree(saved_model_dir, os.path.join(work, SERVING_DIR))
        if model_dir is not None:
            report = fs.join(model_dir, IMPORTER_REPORT)
            if fs.exists(report):
                fs.copy(report, os.path.join(work, IMPORTER_REPORT))
            if torch_model.has_model(torch_model.folder_of(model_dir)):
                fs.copy_tree(torch_model.folder_of(model_dir), torch_model.folder_of(work))
        yield os.path.join(work, SERVING_DIR), (work if model_dir is not None else None)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def carry_pytorch(model_dir: str, output_dir: str) -> None:
    """Copies the input Model's ``Format-PyTorch/`` (when it has one) into the output's."""
    pytorch = torch_model.folder_of(model_dir)
    if torch_model.has_model(pytorch):
        fs.copy_tree(pytorch, torch_model.folder_of(output_dir))


def optimize_local(model_path: str, output_dir: str, config: Optional[OptimizerConfig] = None,
                   examples_dir: Optional[str] = None, batches: Optional[Sequence[int]] = None,
                   probe: Optional[Probe] = None,
                   extra_candidates: Optional[Dict[str, Callable]] = None) -> OptimizeResult:
    """Optimizes ``model_path`` into ``output_dir`` (the Model artifact layout).

    ``config`` is the component's one :class:`OptimizerConfig` (default: its
    defaults), already checked when it was built. Its ``candidates`` pick which
    of ``CPU_CANDIDATES`` are tried on a host without TensorRT (default:
    ``DEFAULT_CPU_CANDIDATES``, those that need no experimental TF Serving flag;
    XLA and TFLite are opt-in). ``batches`` are the batch sizes timed and checked
    (default: :func:`~inputs.timing_batches`: 1 and 32, or 1 and 4 for a detector).
    ``extra_candidates`` maps a name to ``builder(loaded, out_dir) -> Built`` (tests
    use it to offer a deliberately perturbed variant to the drift gate).
    """
    import tensorflow as tf

    from tfx_bridge.components.trt_optimizer import detect

    config = config or OptimizerConfig()
    precision, atol, rtol = config.precision, config.atol, config.rtol
    topk_threshold, op_denylist = config.topk_threshold, config.op_denylist
    candidates = config.candidates
    cpu_candidates = DEFAULT_CPU_CANDIDATES if candidates is None else tuple(candidates)
    source = resolve_saved_model(model_path)
    probe = probe or detect.probe()
    start = time.perf_counter()
    original = tf.saved_model.load(source)
    fn = original.signatures[SERVING_SIGNATURE]
    recorded = importer_report(source)
    specs = input_specs(fn, recorded)
    batches = tuple(batches or timing_batches(recorded))
    bench_feeds = {b: representative_inputs(specs, b, seed=1, examples_dir=examples_dir)
                   for b in batches}
    held_out = {b: representative_inputs(specs, b, seed=2, examples_dir=examples_dir,
                                         held_out=True)
                for b in batches}
    original_servable = tf_servable(fn)
    reference = {b: original_servable.outputs(held_out[b]) for b in batches}

    serving_dir = os.path.join(output_dir, SERVING_DIR)
    if os.path.exists(serving_dir):
        shutil.rmtree(serving_dir)
    os.makedirs(output_dir, exist_ok=True)
    results: List[CandidateResult] = []
    base = CandidateResult("original", BACKEND_ORIGINAL, [])
    base.drift = drift(reference[batches[0]], reference[batches[0]], atol, rtol, topk_threshold)
    results.append(base)

    with tempfile.TemporaryDirectory(prefix="tfx-bridge-optimize-") as work, \
            engines_only(probe.can_run_tensorrt):
        if probe.can_run_tensorrt:
            builders = {BACKEND_TENSORRT: lambda loaded, out: convert_tensorrt(
                source, out, precision, bench_feeds, op_denylist, config.trt_options())}
        else:
            if precision != "fp32":
                raise OptimizerConfigError(
                    f"precision {precision} needs TensorRT, which cannot run here "
                    f"({probe.why_not()}); use --precision fp32 on this host.")
            builders = cpu_builders(cpu_candidates, source)
        builders.update(extra_candidates or {})
        folders, servables = {base.name: (source, [])}, {base.name: original_servable}
        for name, builder in builders.items():
            out = os.path.join(work, name)
            result = CandidateResult(name, BACKEND.get(name, name), [])
            try:
                built = builder(original, out)
                result.serving_flags, result.notes = list(built.flags), list(built.notes)
                candidate = load_servable(out, result.serving_flags)
                for b in batches:
                    result.drift += drift(reference[b], candidate.outputs(held_out[b]), atol,
                                          rtol, topk_threshold)
                folders[name] = (out, result.serving_flags)
                # A drifted CPU candidate is refused: no time spent on it. A TF-TRT build
                # is timed either way (its report shows what failed validation cost).
                if result.passed or probe.can_run_tensorrt:
                    servables[name] = candidate
            except Exception as e:  # a candidate that does not build is reported, not fatal
                result.error = short_message(e)
            results.append(result)
        try:
            timing = _time(servables, {n: folders[n] for n in servables}, bench_feeds,
                           config, in_child=not probe.can_run_tensorrt)
        except subprocess.TimeoutExpired as e:
            # A timing run that does not finish decides nothing: the candidates are
            # recorded as not timed and the original is kept.
            why = (f"{NOT_TIMED}: the timing run did not finish within {e.timeout:g} s "
                   "(the model's calls are too slow for the time budget; raise "
                   "time_budget_s)")
            for r in results[1:]:
                if r.error is None:
                    r.error = why
            timing = {"latency": {}, "error": why}
        by_name = {r.name: r for r in results}
        for name, latencies in timing.pop("latency").items():
            by_name[name].latency = latencies
        decide.judge(results)
        chosen, decision = decide.choose(results, trt=probe.can_run_tensorrt)
        session = None
        if probe.can_run_tensorrt or TFLITE_FLAG in chosen.serving_flags:
            pass  # TFLite's interpreter has no session threads; a TensorRT host's timing
            # was not this one's
        elif "error" in timing:  # calls too slow for the budget: not timed a second time
            session = session_threads.unmeasured(
                "the candidates' timing did not finish: " + timing["error"])
        else:  # TF Serving's session threads for the kept graph
            session = session_threads.measure_session(
                folders[chosen.name][0], bench_feeds, config.time_budget_s,
                config.iterations)
        shutil.copytree(folders[chosen.name][0], serving_dir)
    blessed = chosen.passed
    if probe.can_run_tensorrt and chosen.name != BACKEND_TENSORRT:
        blessed = False  # TensorRT was asked for by the host and did not pass: say so
    report = build_report(results, chosen, probe, precision, batches, atol, rtol,
                          topk_threshold, time.perf_counter() - start, blessed, decision,
                          timing, specs, session)
    write_report(output_dir, report, results)
    return OptimizeResult(blessed, chosen.backend, precision if chosen.backend ==
                          BACKEND_TENSORRT else "fp32", chosen.backend == BACKEND_TENSORRT,
                          chosen.serving_flags, report)


def _time(servables: Dict[str, object], folders: Dict[str, tuple], feeds: Dict[int, Dict],
          config: OptimizerConfig, in_child: bool) -> dict:
    """Latencies of the original and every candidate that passed drift, within the
    config's time budget: on a CPU host in a child process that runs TF Serving's CPU
    kernels (``measure_worker``), with TensorRT here (its engines need this
    process's validation settings)."""
    alpha = decide.candidate_alpha(len(servables) - 1)
    rounds = decide.min_rounds(alpha)
    if in_child:
        # A candidate refused at the cheapest batch size is not timed at the costlier.
        latency, info = measure_worker.time_in_child(
            folders, feeds, config.time_budget_s, config.iterations, rounds,
            timeout_s=max(600.0, 20 * config.time_budget_s),
            refuse={"reference": BACKEND_ORIGINAL, "alpha": alpha, "margin": decide.MARGIN})
    else:
        calls = {b: {name: (s.call, s.prepare(f)) for name, s in servables.items()}
                 for b, f in feeds.items()}
        timed, info = measure_budgeted(calls, config.time_budget_s, config.iterations, rounds)
        latency = {name: [timed[b][name] for b in sorted(timed)] for name in servables}
    return {"latency": latency, **info}


__all__ = ["optimize", "optimize_local"]


