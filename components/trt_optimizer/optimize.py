"""TrtOptimizer's core: make a SavedModel fast to serve, prove it, never lie about it.

No TFX imports. With TensorRT and a GPU (probed in a subprocess, see
``detect``): TF-TRT in a child process, engines built ahead, validated with
native-segment fallback disabled. Without (CPU hosts, CI): candidates are
built, measured side by side and drift-checked, and the fastest that passes
is kept, or the original when nothing wins:

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
``candidates``, and the report says what each flag costs. When nothing tried
beats the original on this host the original is kept, and the report says so.

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
import dataclasses
import json
import os
import shutil
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from tfx_bridge import child
from tfx_bridge.artifacts import compare, layout, savedmodel
from tfx_bridge.artifacts.savedmodel import (
    EXAMPLE_SIGNATURE,
    SERVING_SIGNATURE,
    TFLITE_FILE,
    TFLITE_FLAG,
    XLA_FLAG,
)
from tfx_bridge.components.trt_optimizer import tflite
from tfx_bridge.components.trt_optimizer.detect import Probe
from tfx_bridge.components.trt_optimizer.errors import OptimizerConfigError, OptimizerError
from tfx_bridge.errors import short_message
from tfx_bridge.storage import fs

SERVING_DIR = savedmodel.SERVING_DIR
NOXLA_SIGNATURE = "serving_default_noxla"
# What a Transform-wrapped SavedModel exposes beside its signatures (docs/ARCHITECTURE.md).
TRANSFORM_WRAPPED_ATTRIBUTES = ("inner", "transform_raw", "transform_examples")
REPORT_JSON = layout.REPORT_JSON
REPORT_MD = layout.REPORT_MD
REPORT_PNG = "latency.png"
IMPORTER_REPORT = layout.REPORT_JSON
PRECISIONS = ("fp32", "fp16", "int8")
BACKEND_ORIGINAL = "original"
BACKEND_TENSORRT = "tensorrt"
DEFAULT_ATOL = 1e-4
DEFAULT_ITERATIONS = 100  # timed calls per candidate and batch size
DEFAULT_BATCHES = (1, 32)
DEFAULT_OP_DENYLIST = ("TopKV2",)


@dataclasses.dataclass
class Latency:
    batch: int
    p50_ms: float
    p99_ms: float


@dataclasses.dataclass
class Drift:
    output: str
    dtype: str
    max_abs: float
    max_rel: float
    mismatches: int
    topk_agreement: Optional[float]
    ok: bool


@dataclasses.dataclass
class CandidateResult:
    name: str
    backend: str
    serving_flags: List[str]
    latency: List[Latency] = dataclasses.field(default_factory=list)
    drift: List[Drift] = dataclasses.field(default_factory=list)
    error: Optional[str] = None
    notes: List[str] = dataclasses.field(default_factory=list)  # rewrites applied

    @property
    def passed(self) -> bool:
        return self.error is None and all(d.ok for d in self.drift)


@dataclasses.dataclass
class OptimizeResult:
    blessed: bool
    backend: str
    precision: str
    requires_gpu: bool
    serving_flags: List[str]
    report: dict


# --------------------------------------------------------------------------- inputs


def resolve_saved_model(path: str) -> str:
    """A SavedModel folder, or a Model artifact folder holding Format-Serving/."""
    return savedmodel.resolve_saved_model(path, OptimizerConfigError)


def _input_specs(saved_model_dir: str, fn):
    """The serving inputs as importer TensorSpecs, with value ranges when the importer
    recorded them (report.json beside Format-Serving), so random inputs stay valid."""
    from tfx_bridge.artifacts import tensorspec

    declared = {}
    report = fs.join(fs.dirname(saved_model_dir.rstrip("/")), IMPORTER_REPORT)
    if fs.exists(report):
        for text in json.loads(fs.read_text(report)).get("inputs", []):
            spec = tensorspec.parse_input_spec(text, OptimizerConfigError)
            declared[spec.name] = spec
    specs = []
    for name, t in sorted(fn.structured_input_signature[1].items()):
        if name in declared:
            specs.append(declared[name])
            continue
        dims = tuple(-1 if d is None else int(d) for d in t.shape.as_list())
        if not dims or dims[0] != -1:
            dims = (-1,) + dims[1:] if dims else (-1,)
        specs.append(tensorspec.TensorSpec(name, t.dtype.name, dims))
    return specs


def representative_inputs(specs, batch: int, seed: int, examples_dir: Optional[str] = None,
                          held_out: bool = False) -> Dict[str, np.ndarray]:
    """From Examples when given (tiled to ``batch``), else random within range.

    The records read are split in two halves: timing inputs come from the
    first, ``held_out`` (drift-check) inputs from the second, so a candidate is
    never checked on the rows it was timed on (given at least two records).
    Random inputs differ by ``seed``.
    """
    from tfx_bridge.artifacts import examples, tensorspec

    if examples_dir:
        real = examples.inputs_from_examples(examples_dir, specs, 2 * max(batch, 32),
                                             OptimizerConfigError)
        if real:
            n = len(next(iter(real.values())))
            if n >= 2:
                half = n // 2
                real = {k: (v[half:] if held_out else v[:half]) for k, v in real.items()}
            tiled = examples.tile_rows(real, batch)
            if tiled is not None:
                return tiled
    return tensorspec.make_inputs(specs, batch, seed=seed)


# --------------------------------------------------------------------------- measure


def measure(fn: Callable, feeds: Dict, iterations: int, warmup: int = 10) -> Latency:
    """p50/p99 of wall time per call, after warm-up (XLA compiles in the warm-up)."""
    return measure_interleaved({"": (fn, feeds)}, iterations, rounds=1, warmup=warmup)[""]


def measure_interleaved(calls: Dict[str, tuple], iterations: int, rounds: int = 10,
                        warmup: int = 10) -> Dict[str, Latency]:
    """``measure`` for several ``name: (fn, feeds)`` at once, in interleaved rounds, so
    a noisy moment on a shared host lands on every candidate, not on one."""
    times: Dict[str, List[float]] = {name: [] for name in calls}
    for fn, feeds in calls.values():
        for _ in range(warmup):
            fn(**feeds)
    per_round = max(1, iterations // rounds)
    order = list(calls)
    for r in range(rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            fn, feeds = calls[name]
            for _ in range(per_round):
                start = time.perf_counter()
                fn(**feeds)
                times[name].append(time.perf_counter() - start)
    out = {}
    for name, (_, feeds) in calls.items():
        batch = int(next(iter(feeds.values())).shape[0])
        out[name] = Latency(batch, float(np.percentile(times[name], 50) * 1e3),
                            float(np.percentile(times[name], 99) * 1e3))
    return out


def _topk_agreement(ref: np.ndarray, got: np.ndarray) -> float:
    """Fraction of rows whose index sets agree (order-free), for [B, k] index outputs."""
    if ref.ndim != 2 or ref.shape != got.shape:
        return float(np.mean(ref == got)) if ref.shape == got.shape else 0.0
    return float(np.mean([set(a) == set(b) for a, b in zip(ref.tolist(), got.tolist(),
                                                           strict=True)]))


def drift(reference: Dict[str, np.ndarray], candidate: Dict[str, np.ndarray], atol: float,
          rtol: float, topk_threshold: float) -> List[Drift]:
    """Per output: max abs/rel error; integer outputs exact, or top-k set agreement
    >= ``topk_threshold`` when that is below 1."""
    out = []
    for name in sorted(reference):
        r, g = np.asarray(reference[name]), np.asarray(candidate.get(name))
        # A changed shape or dtype is a changed contract: drift too.
        c = compare.compare(r, g, atol, rtol, same_dtype=True)
        agreement, ok = None, c.ok
        if compare.is_exact_dtype(r.dtype) and c.max_abs != float("inf"):
            agreement = _topk_agreement(r, g)
            ok = c.ok or (topk_threshold < 1.0 and agreement >= topk_threshold)
        out.append(Drift(name, str(r.dtype), c.max_abs, c.max_rel, c.mismatches, agreement, ok))
    return out


@dataclasses.dataclass
class Servable:
    """A candidate as its runtime calls it: ``prepare`` turns numpy feeds into the
    runtime's own inputs once, outside the timed calls."""
    call: Callable
    prepare: Callable[[Dict[str, np.ndarray]], Dict]

    def outputs(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.call(**self.prepare(feeds)).items()}


def load_servable(saved_model_dir: str, flags: Sequence[str] = ()) -> Servable:
    """The serving_default a TF Serving started with ``flags`` would run."""
    import tensorflow as tf

    if TFLITE_FLAG in flags:
        # TF Serving's TfLiteSession runs each interpreter on one thread, with
        # BuiltinOpResolver's kernels; no delegate, so what is timed and drift-checked
        # here is the floor of what the server runs.
        interpreter = tf.lite.Interpreter(
            model_path=os.path.join(saved_model_dir, TFLITE_FILE), num_threads=1,
            experimental_op_resolver_type=(
                tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
        runner = interpreter.get_signature_runner(SERVING_SIGNATURE)
        return Servable(runner, lambda feeds: {k: np.ascontiguousarray(v)
                                               for k, v in feeds.items()})
    return tf_servable(tf.saved_model.load(saved_model_dir).signatures[SERVING_SIGNATURE])


def tf_servable(fn) -> Servable:
    """A TF signature function, fed tf.constants made once outside the timed calls."""
    import tensorflow as tf

    return Servable(fn, lambda feeds: {k: tf.constant(v) for k, v in feeds.items()})


# --------------------------------------------------------------------------- candidates


def _frozen(fn):
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )
    return convert_variables_to_constants_v2(fn)


def build_cpu_candidate(name: str, loaded, out_dir: str) -> List[str]:
    """Saves candidate ``name`` built from ``loaded`` into ``out_dir``; returns serving flags.

    A Transform-wrapped SavedModel (``inner``, ``transform_raw``,
    ``transform_examples``: docs/ARCHITECTURE.md) has its model half optimized
    and its preprocessing half (string inputs, lookup tables, vocabulary
    assets) kept as it is: lookup tables cannot be frozen into constants.
    """
    import tensorflow as tf

    outer = loaded.signatures[SERVING_SIGNATURE]
    wrapped = all(hasattr(loaded, a) for a in TRANSFORM_WRAPPED_ATTRIBUTES)
    fn = loaded.inner.signatures[SERVING_SIGNATURE] if wrapped else outer
    specs = outer.structured_input_signature[1]
    names = sorted(specs)
    input_signature = [tf.TensorSpec(specs[n].shape, specs[n].dtype, name=n) for n in names]
    frozen = None if name == "xla-cpu" else _frozen(fn)
    module = tf.Module()
    module.loaded = loaded

    def model(feeds):
        if frozen is None:
            return fn(**feeds)
        # A frozen function returns a flat list in tf.nest order; restore the names.
        return tf.nest.pack_sequence_as(fn.structured_outputs, frozen(**feeds))

    def plain(*args):
        feeds = dict(zip(names, args, strict=True))
        return model(loaded.transform_raw(feeds) if wrapped else feeds)

    jit = name in ("xla-cpu", "xla-frozen")
    # autograph=False throughout: the wrappers call loaded functions, no Python control
    # flow on tensors to convert.
    serve = tf.function(plain, input_signature=input_signature, jit_compile=jit and not wrapped,
                        autograph=False)
    if jit and wrapped:  # XLA compiles the model half; string ops and tables stay outside
        compiled = tf.function(model, jit_compile=True, autograph=False)
        serve = tf.function(lambda *args: compiled(loaded.transform_raw(
            dict(zip(names, args, strict=True)))), input_signature=input_signature,
            autograph=False)
    signatures = {SERVING_SIGNATURE: serve.get_concrete_function()}
    flags = []
    if jit:
        noxla = tf.function(plain, input_signature=input_signature, autograph=False)
        signatures[NOXLA_SIGNATURE] = noxla.get_concrete_function()
        module.noxla = noxla
        flags.append(XLA_FLAG)
    if EXAMPLE_SIGNATURE in loaded.signatures:
        example_fn = loaded.signatures[EXAMPLE_SIGNATURE]
        ex_specs = example_fn.structured_input_signature[1]
        ex_names = sorted(ex_specs)
        if wrapped:
            def call_examples(*args):
                return model(loaded.transform_examples(*args))
        else:
            def call_examples(*args):
                return example_fn(**dict(zip(ex_names, args, strict=True)))
        examples = tf.function(
            call_examples, autograph=False,
            input_signature=[tf.TensorSpec(ex_specs[n].shape, ex_specs[n].dtype, name=n)
                             for n in ex_names])
        signatures[EXAMPLE_SIGNATURE] = examples.get_concrete_function()
        module.examples = examples
    module.serve = serve
    tf.saved_model.save(module, out_dir, signatures=signatures)
    return flags


CPU_CANDIDATES = ("xla-cpu", "xla-frozen", "frozen", "tflite")
# The experimental TF Serving flag each candidate needs (None: none).
CANDIDATE_FLAG = {"xla-cpu": XLA_FLAG, "xla-frozen": XLA_FLAG, "frozen": None,
                  "tflite": TFLITE_FLAG}
# Tried unless ``candidates`` says otherwise: what stock TF Serving serves as is.
DEFAULT_CPU_CANDIDATES = tuple(n for n in CPU_CANDIDATES if CANDIDATE_FLAG[n] is None)
_BACKEND = {"xla-cpu": "xla-cpu", "xla-frozen": "xla-cpu", "frozen": "grappler-cpu",
            "tflite": "tflite-cpu"}
# What the ``backend`` property can say on a host without TensorRT.
CPU_BACKENDS = (BACKEND_ORIGINAL, *sorted(set(_BACKEND.values())))


# --------------------------------------------------------------------------- optimize


def optimize(model_path: str, output_dir: str, *args, **kwargs) -> OptimizeResult:
    """Optimizes ``model_path`` into ``output_dir``; either may be a URI.

    TF-TRT, XLA and the TFLite converter work on local folders: a remote model
    (its Model artifact folder, with the importer's report beside
    Format-Serving) is copied to a local folder first, the output is written
    locally and uploaded when every step has finished, and both copies are
    removed. Arguments after the first two are :func:`optimize_local`'s.
    """
    if not (fs.is_remote(model_path) or fs.is_remote(output_dir)):
        return optimize_local(model_path, output_dir, *args, **kwargs)
    resolve_saved_model(model_path)  # a clear refusal before anything is copied
    with fs.local_copy(model_path) as local_model, fs.local_output(output_dir) as local_out:
        return optimize_local(local_model, local_out, *args, **kwargs)


def optimize_local(model_path: str, output_dir: str, precision: str = "fp32",
                   examples_dir: Optional[str] = None, atol: float = DEFAULT_ATOL,
                   rtol: float = 0.0, topk_threshold: float = 1.0,
                   iterations: int = DEFAULT_ITERATIONS,
                   batches: Sequence[int] = DEFAULT_BATCHES, probe: Optional[Probe] = None,
                   op_denylist: Sequence[str] = DEFAULT_OP_DENYLIST,
                   extra_candidates: Optional[Dict[str, Callable]] = None,
                   trt_options: Optional[dict] = None,
                   candidates: Optional[Sequence[str]] = None) -> OptimizeResult:
    """Optimizes ``model_path`` into ``output_dir`` (the Model artifact layout).

    ``candidates`` picks which of ``CPU_CANDIDATES`` are tried on a host
    without TensorRT (default: ``DEFAULT_CPU_CANDIDATES``, those that need no
    experimental TF Serving flag; XLA and TFLite are opt-in). ``extra_candidates`` maps a name to
    ``builder(loaded, out_dir) -> flags`` (tests use it to offer a
    deliberately perturbed variant to the drift gate).
    """
    import tensorflow as tf

    from tfx_bridge.components.trt_optimizer import detect

    if precision not in PRECISIONS:
        raise OptimizerConfigError(f"precision {precision!r}: use one of {PRECISIONS}.")
    if not 0.0 < topk_threshold <= 1.0:
        raise OptimizerConfigError(f"topk_threshold must be in (0, 1], got {topk_threshold}.")
    cpu_candidates = DEFAULT_CPU_CANDIDATES if candidates is None else tuple(candidates)
    unknown = sorted(set(cpu_candidates) - set(CPU_CANDIDATES))
    if unknown:
        raise OptimizerConfigError(f"unknown candidates {unknown}: use some of "
                                   f"{list(CPU_CANDIDATES)}.")
    source = resolve_saved_model(model_path)
    probe = probe or detect.probe()
    start = time.perf_counter()
    original = tf.saved_model.load(source)
    fn = original.signatures[SERVING_SIGNATURE]
    specs = _input_specs(source, fn)
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
                source, out, precision, bench_feeds, op_denylist, trt_options or {})}
        else:
            if precision != "fp32":
                raise OptimizerConfigError(
                    f"precision {precision} needs TensorRT, which cannot run here "
                    f"({probe.why_not()}); use --precision fp32 on this host.")
            builders = {name: (lambda loaded, out, name=name: build_cpu_candidate(
                name, loaded, out)) for name in cpu_candidates if name != "tflite"}
            if "tflite" in cpu_candidates:
                builders["tflite"] = lambda loaded, out: tflite.build(source, out)
        builders.update(extra_candidates or {})
        folders, servables = {}, {base.name: original_servable}
        for name, builder in builders.items():
            out = os.path.join(work, name)
            result = CandidateResult(name, _BACKEND.get(name, name), [])
            try:
                built = builder(original, out)
                if isinstance(built, tflite.Built):
                    result.serving_flags, result.notes = built.flags, built.notes
                else:
                    result.serving_flags = list(built)
                candidate = load_servable(out, result.serving_flags)
                for b in batches:
                    result.drift += drift(reference[b], candidate.outputs(held_out[b]), atol,
                                          rtol, topk_threshold)
                folders[name], servables[name] = out, candidate
            except Exception as e:  # a candidate that does not build is reported, not fatal
                result.error = short_message(e)
            results.append(result)
        by_name = {r.name: r for r in results}
        for b in batches:
            timed = measure_interleaved(
                {name: (s.call, s.prepare(bench_feeds[b])) for name, s in servables.items()},
                iterations)
            for name, latency in timed.items():
                by_name[name].latency.append(latency)

        chosen = choose(results, trt=probe.can_run_tensorrt)
        if chosen.name == "original":
            shutil.copytree(source, serving_dir)
        else:
            shutil.copytree(folders[chosen.name], serving_dir)
    blessed = chosen.passed
    if probe.can_run_tensorrt and chosen.name != BACKEND_TENSORRT:
        blessed = False  # TensorRT was asked for by the host and did not pass: say so
    report = build_report(results, chosen, probe, precision, batches, atol, rtol,
                          topk_threshold, time.perf_counter() - start, blessed)
    write_report(output_dir, report, results)
    return OptimizeResult(blessed, chosen.backend, precision if chosen.backend ==
                          BACKEND_TENSORRT else "fp32", chosen.backend == BACKEND_TENSORRT,
                          chosen.serving_flags, report)


def choose(results: List[CandidateResult], trt: bool) -> CandidateResult:
    """The fastest candidate that passed drift (mean of p50 ratios over batches),
    or the original when none is faster. On a TensorRT host the TRT build is
    the candidate (it is validated, and failing it is reported, not hidden)."""
    base = results[0]
    if trt:
        trt_result = next((r for r in results if r.backend == BACKEND_TENSORRT), None)
        if trt_result is not None and trt_result.error is None:
            return trt_result
        return base
    best, best_score = base, 1.0
    for r in results[1:]:
        if not r.passed:
            continue
        score = float(np.mean([c.p50_ms / o.p50_ms for c, o in
                               zip(r.latency, base.latency, strict=True)]))
        if score < best_score:
            best, best_score = r, score
    return best


# --------------------------------------------------------------------------- TensorRT



TRT_WORKER_MODULE = "tfx_bridge.components.trt_optimizer.trt_worker"


def convert_tensorrt(source: str, out: str, precision: str, feeds: Dict[int, Dict],
                     op_denylist: Sequence[str], options: dict) -> List[str]:
    """TF-TRT in a child process (a crash there cannot take the executor down)."""
    spec = {
        "source": source, "out": out, "precision": precision,
        "op_denylist": list(op_denylist),
        "workspace_bytes": options.get("workspace_bytes", 1 << 30),
        "minimum_segment_size": options.get("minimum_segment_size", 3),
        "maximum_cached_engines": options.get("maximum_cached_engines", 1),
        "feeds": {str(b): {k: v.tolist() for k, v in f.items()} for b, f in feeds.items()},
        "dtypes": {k: str(v.dtype) for k, v in next(iter(feeds.values())).items()},
    }
    result = child.run_python(["-m", TRT_WORKER_MODULE, json.dumps(spec)], "TRT_SUMMARY ",
                              timeout=3600)
    if result.returncode != 0:
        raise OptimizerError(f"TF-TRT conversion failed (exit {result.returncode}): "
                             f"{result.stderr_tail}")
    with open(os.path.join(out, "trt_summary.txt"), "w") as f:
        f.write(result.payload or "")
    return []


NATIVE_SEGMENT_ENV = "TF_TRT_ALLOW_ENGINE_NATIVE_SEGMENT_EXECUTION"


@contextlib.contextmanager
def engines_only(active: bool):
    """While validating a TF-TRT build: native-segment fallback off, so a drift check
    proves the engines ran rather than TF's own kernels. The executor's environment
    is restored afterwards (other components may run in this process)."""
    before = os.environ.get(NATIVE_SEGMENT_ENV)
    if active:
        os.environ[NATIVE_SEGMENT_ENV] = "False"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(NATIVE_SEGMENT_ENV, None)
        else:
            os.environ[NATIVE_SEGMENT_ENV] = before


# --------------------------------------------------------------------------- report


def build_report(results, chosen, probe: Probe, precision, batches, atol, rtol, topk,
                 seconds, blessed) -> dict:
    base = results[0]
    before = {f"p50_ms_batch_{lat.batch}": round(lat.p50_ms, 4) for lat in base.latency}
    after = {f"p50_ms_batch_{lat.batch}": round(lat.p50_ms, 4) for lat in chosen.latency}
    return {
        "blessed": blessed,
        "backend": chosen.backend,
        "candidate": chosen.name,
        "precision": precision if chosen.backend == BACKEND_TENSORRT else "fp32",
        "requires_gpu": chosen.backend == BACKEND_TENSORRT,
        "serving_flags": chosen.serving_flags,
        "tensorrt": {"ran": chosen.backend == BACKEND_TENSORRT,
                     "available": probe.tensorrt, "gpus": probe.gpus,
                     "linked_version": probe.linked_version,
                     "why_not": probe.why_not() or None},
        "serving_notes": serving_notes(chosen.serving_flags)
        + kept_original_notes(chosen, results, probe.can_run_tensorrt),
        "rewrites": chosen.notes,
        "latency_before_ms": before,
        "latency_after_ms": after,
        "tolerance": {"atol": atol, "rtol": rtol, "topk_agreement": topk},
        "batches": list(batches),
        "seconds": round(seconds, 2),
        "candidates": [dataclasses.asdict(r) | {"passed": r.passed} for r in results],
    }


def serving_notes(flags: Sequence[str]) -> List[str]:
    """What each serving flag the kept model needs means for the server."""
    notes = []
    if XLA_FLAG in flags:
        notes.append(f"TF Serving needs `{XLA_FLAG}` for the XLA-compiled serving_default "
                     "(marked experimental in TF Serving, server-wide); "
                     f"`{NOXLA_SIGNATURE}` is kept for servers without it.")
    if TFLITE_FLAG in flags:
        notes.append(f"TF Serving serves `{TFLITE_FILE}` only with `{TFLITE_FLAG}` "
                     f"(marked experimental in TF Serving, server-wide, ignored by TFRT-based "
                     f"servers); under it the server exposes {SERVING_SIGNATURE} only "
                     f"({EXAMPLE_SIGNATURE} stays in the SavedModel, so tf.Example clients "
                     "lose it on that server). Without the flag it serves the unchanged "
                     "SavedModel, at the original's speed.")
    return notes


def kept_original_notes(chosen: CandidateResult, results: List[CandidateResult],
                        trt: bool) -> List[str]:
    """Says plainly when the kept model is the original, and why."""
    if trt or chosen.name != BACKEND_ORIGINAL:
        return []
    tried = [r.name for r in results[1:]]
    opt_in = sorted(n for n, flag in CANDIDATE_FLAG.items() if flag and n not in tried)
    note = ("Kept the original SavedModel: nothing faster exists on this host among the "
            f"candidates tried ({', '.join(tried) or 'none'}).")
    if opt_in:
        note += (" Opt-in candidates that need experimental TF Serving flags: "
                 + ", ".join(f"{n} ({CANDIDATE_FLAG[n]})" for n in opt_in) + ".")
    return [note]


def write_report(output_dir: str, report: dict, results: List[CandidateResult]) -> None:
    with open(os.path.join(output_dir, REPORT_JSON), "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    lines = ["# TrtOptimizer report", "",
             f"Result: **{'blessed' if report['blessed'] else 'NOT blessed'}**, backend "
             f"**{report['backend']}** (candidate {report['candidate']}), precision "
             f"{report['precision']}", ""]
    if not report["tensorrt"]["ran"]:
        lines += [f"TensorRT did not run: {report['tensorrt']['why_not']}.", ""]
    notes = report["serving_notes"] + [f"Rewrite: {r}" for r in report["rewrites"]]
    lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    lines += ["| candidate | backend | " + " | ".join(
        f"p50 b{b} ms | p99 b{b} ms" for b in report["batches"]) + " | drift ok | note |",
        "|---|---|" + "---|---|" * len(report["batches"]) + "---|---|"]
    for r in results:
        lat = " | ".join(f"{x.p50_ms:.3f} | {x.p99_ms:.3f}" for x in r.latency) or " | ".join(
            ["-", "-"] * len(report["batches"]))
        worst = max((d.max_abs for d in r.drift), default=0.0)
        note = r.error or (f"max abs {worst:.3g}" if r.drift else "")
        lines.append(f"| {r.name} | {r.backend} | {lat} | {'yes' if r.passed else 'NO'} | "
                     f"{note} |")
    with open(os.path.join(output_dir, REPORT_MD), "w") as f:
        f.write("\n".join(lines) + "\n")
    _plot(os.path.join(output_dir, REPORT_PNG), results, report["batches"])


def _plot(path: str, results: List[CandidateResult], batches) -> None:
    """A small bar chart of p50 latency per candidate and batch size."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in results if r.latency]
    fig, ax = plt.subplots(figsize=(6, 3), dpi=100)
    width = 0.8 / max(1, len(batches))
    for i, b in enumerate(batches):
        xs = [j + i * width for j in range(len(shown))]
        ax.bar(xs, [r.latency[i].p50_ms for r in shown], width, label=f"batch {b}")
    ax.set_xticks([j + width * (len(batches) - 1) / 2 for j in range(len(shown))])
    ax.set_xticklabels([r.name + ("" if r.passed else " (drift)") for r in shown], fontsize=8)
    ax.set_ylabel("p50 ms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


__all__ = ["optimize", "choose", "drift", "measure"]
