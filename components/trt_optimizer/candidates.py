"""Building candidates: the CPU ones (frozen, XLA, TFLite) and TF-TRT (in a child
process, engines built for the measured batch sizes)."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import Callable, Dict, Optional, Sequence

from tfx_bridge import child, envvars
from tfx_bridge.artifacts.savedmodel import (
    EXAMPLE_SIGNATURE,
    SERVING_SIGNATURE,
    TFLITE_FLAG,
    XLA_FLAG,
)
from tfx_bridge.components.trt_optimizer import tflite
from tfx_bridge.components.trt_optimizer.errors import OptimizerError
from tfx_bridge.components.trt_optimizer.results import (
    BACKEND_ORIGINAL,
    NOXLA_SIGNATURE,
    TRANSFORM_WRAPPED_ATTRIBUTES,
    Built,
)

# --------------------------------------------------------------------------- candidates


def _frozen(fn):
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )
    return convert_variables_to_constants_v2(fn)


def build_cpu_candidate(name: str, loaded, out_dir: str) -> Built:
    """Saves candidate ``name`` built from ``loaded`` into ``out_dir``, with the serving
    flags it needs.

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
    return Built(flags)


@dataclasses.dataclass(frozen=True)
class CpuCandidate:
    """One CPU candidate: ``build(source folder, loaded SavedModel, output folder) ->
    Built``, the ``backend`` property a kept build records, and the experimental TF
    Serving flag it needs (None: stock TF Serving serves it as is, so it is tried by
    default)."""

    build: Callable[[str, object, str], Built]
    backend: str
    flag: Optional[str] = None


def _saved(name: str) -> Callable[[str, object, str], Built]:
    return lambda source, loaded, out: build_cpu_candidate(name, loaded, out)


# Every CPU candidate, in the order tried: a new one (a layout or folding pass) is one
# entry here; the config's checks, the defaults and the report follow from it.
CPU_REGISTRY: Dict[str, CpuCandidate] = {
    "xla-cpu": CpuCandidate(_saved("xla-cpu"), "xla-cpu", XLA_FLAG),
    "xla-frozen": CpuCandidate(_saved("xla-frozen"), "xla-cpu", XLA_FLAG),
    "frozen": CpuCandidate(_saved("frozen"), "grappler-cpu"),
    "tflite": CpuCandidate(lambda source, loaded, out: tflite.build(source, out),
                           "tflite-cpu", TFLITE_FLAG),
}
CPU_CANDIDATES = tuple(CPU_REGISTRY)
# The experimental TF Serving flag each candidate needs (None: none).
CANDIDATE_FLAG = {n: c.flag for n, c in CPU_REGISTRY.items()}
# Tried unless ``candidates`` says otherwise: what stock TF Serving serves as is.
DEFAULT_CPU_CANDIDATES = tuple(n for n, c in CPU_REGISTRY.items() if c.flag is None)
BACKEND = {n: c.backend for n, c in CPU_REGISTRY.items()}
# What the ``backend`` property can say on a host without TensorRT.
CPU_BACKENDS = (BACKEND_ORIGINAL, *sorted(set(BACKEND.values())))


def cpu_builders(names: Sequence[str], source: str) -> Dict[str, Callable[[object, str], Built]]:
    """``builder(loaded, out_dir) -> Built`` for each candidate of ``names``, in order."""
    return {n: (lambda loaded, out, n=n: CPU_REGISTRY[n].build(source, loaded, out))
            for n in names}


# --------------------------------------------------------------------------- TensorRT



TRT_WORKER_MODULE = "tfx_bridge.components.trt_optimizer.trt_worker"


def convert_tensorrt(source: str, out: str, precision: str, feeds: Dict[int, Dict],
                     op_denylist: Sequence[str], options: dict) -> Built:
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
    return Built([])


NATIVE_SEGMENT_ENV = "TF_TRT_ALLOW_ENGINE_NATIVE_SEGMENT_EXECUTION"


@contextlib.contextmanager
def engines_only(active: bool):
    """While validating a TF-TRT build: native-segment fallback off, so a drift check
    proves the engines ran rather than TF's own kernels. The executor's environment
    is restored afterwards (other components may run in this process)."""
    with envvars.scoped(NATIVE_SEGMENT_ENV, "False" if active else None):
        yield
