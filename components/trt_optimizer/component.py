"""TrtOptimizer: the TFX component (spec, class, build-time checks)."""
from __future__ import annotations

import json
from typing import Optional, Sequence

from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel, component_spec, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_bridge.components.trt_optimizer import executor, optimize
from tfx_bridge.components.trt_optimizer.errors import OptimizerConfigError

MODEL_KEY = executor.MODEL_KEY
EXAMPLES_KEY = executor.EXAMPLES_KEY
OPTIMIZED_MODEL_KEY = executor.OPTIMIZED_MODEL_KEY
BLESSED_PROPERTY = executor.BLESSED_PROPERTY


class TrtOptimizerSpec(component_spec.ComponentSpec):
    """Model (+ Examples) -> optimized Model (Format-Serving)."""

    PARAMETERS = {
        executor.PRECISION_KEY: ExecutionParameter(type=str, optional=True),
        executor.ATOL_KEY: ExecutionParameter(type=float, optional=True),
        executor.RTOL_KEY: ExecutionParameter(type=float, optional=True),
        executor.TOPK_THRESHOLD_KEY: ExecutionParameter(type=float, optional=True),
        executor.ITERATIONS_KEY: ExecutionParameter(type=int, optional=True),
        executor.OP_DENYLIST_KEY: ExecutionParameter(type=str, optional=True),
        executor.WORKSPACE_BYTES_KEY: ExecutionParameter(type=int, optional=True),
        executor.MINIMUM_SEGMENT_SIZE_KEY: ExecutionParameter(type=int, optional=True),
        executor.MAXIMUM_CACHED_ENGINES_KEY: ExecutionParameter(type=int, optional=True),
        executor.FAIL_ON_DRIFT_KEY: ExecutionParameter(type=int, optional=True),
        executor.CANDIDATES_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS = {OPTIMIZED_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}


class TrtOptimizer(base_component.BaseComponent):
    """Replaces the Trainer: makes the imported SavedModel fast to serve, and proves it.

    With TensorRT and a GPU (probed in a subprocess, so a missing libnvinfer
    cannot abort the executor): TF-TRT at the given precision, engines built
    ahead, validated with native-segment fallback disabled. Without: CPU
    candidates are measured against the original (p50/p99 at batch 1 and 32)
    and drift-checked on held-out inputs; the fastest that passes is kept, or
    the original (the report says so). By default only candidates stock TF
    Serving serves without experimental flags are tried (a frozen,
    Grappler-optimized graph); XLA, frozen XLA and TFLite are opt-in
    (``candidates``): an XLA choice records ``--xla_cpu_compilation_enabled=true``
    and keeps ``serving_default_noxla``; a TFLite choice writes ``model.tflite``
    beside the unchanged SavedModel and records ``--prefer_tflite_model=true``.
    Both flags are marked experimental in TF Serving and apply server-wide.
    The backend recorded is the one that ran, never TensorRT when it did not.

    Outputs:
      optimized_model: ``standard_artifacts.Model`` with ``Format-Serving/``,
        ``report.json``, ``report.md``, ``latency.png``; custom properties
        ``blessed``, ``backend``, ``precision``, ``requires_gpu``,
        ``serving_flags``, ``latency_p50_ms_before`` / ``_after`` (exact:
        JSON-value properties, see tfx_bridge.artifacts.properties).

    Example:
      >>> from tfx_bridge.components import TrtOptimizer
      >>> optimizer = TrtOptimizer(model=importer.outputs["model"],  # doctest: +SKIP
      ...                          examples=example_gen.outputs["examples"])
    """

    SPEC_CLASS = TrtOptimizerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, model, examples=None, precision: str = "fp32",
                 atol: float = optimize.DEFAULT_ATOL, rtol: float = 0.0,
                 topk_threshold: float = 1.0, iterations: int = optimize.DEFAULT_ITERATIONS,
                 op_denylist: Sequence[str] = optimize.DEFAULT_OP_DENYLIST,
                 workspace_bytes: int = 1 << 30, minimum_segment_size: int = 3,
                 maximum_cached_engines: int = 1, fail_on_drift: bool = True,
                 candidates: Optional[Sequence[str]] = None):
        if precision not in optimize.PRECISIONS:
            raise OptimizerConfigError(
                f"TrtOptimizer: precision {precision!r}; use one of {optimize.PRECISIONS}.")
        if not 0.0 < topk_threshold <= 1.0:
            raise OptimizerConfigError(
                f"TrtOptimizer: topk_threshold must be in (0, 1], got {topk_threshold}.")
        if iterations < 10:
            raise OptimizerConfigError(
                f"TrtOptimizer: iterations {iterations} is too few for a p99; use >= 10.")
        unknown = sorted(set(candidates or ()) - set(optimize.CPU_CANDIDATES))
        if unknown:
            raise OptimizerConfigError(
                f"TrtOptimizer: unknown candidates {unknown}; use some of "
                f"{list(optimize.CPU_CANDIDATES)}.")
        spec = TrtOptimizerSpec(
            model=model, examples=examples, precision=precision, atol=float(atol),
            rtol=float(rtol), topk_threshold=float(topk_threshold), iterations=iterations,
            op_denylist=json.dumps(list(op_denylist)), workspace_bytes=workspace_bytes,
            minimum_segment_size=minimum_segment_size,
            maximum_cached_engines=maximum_cached_engines,
            fail_on_drift=int(bool(fail_on_drift)),
            candidates=None if candidates is None else json.dumps(list(candidates)),
            optimized_model=channel.Channel(type=standard_artifacts.Model))
        super().__init__(spec=spec)
