"""TrtOptimizer: the TFX component (spec, class, build-time checks)."""
from __future__ import annotations

from typing import Optional, Sequence

from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel, standard_artifacts

from tfx_bridge.components.trt_optimizer import executor
from tfx_bridge.components.trt_optimizer.config import OptimizerConfig
from tfx_bridge.components.trt_optimizer.spec import TrtOptimizerSpec

_DEFAULTS = OptimizerConfig()


class TrtOptimizer(base_component.BaseComponent):
    """Replaces the Trainer: makes the imported SavedModel fast to serve, and proves it.

    With TensorRT and a GPU (probed in a subprocess, so a missing libnvinfer
    cannot abort the executor): TF-TRT at the given precision, engines built
    ahead, validated with native-segment fallback disabled. Without: CPU
    candidates are drift-checked on held-out inputs, then timed against the
    original (batch 1 and 32, interleaved rounds sized to ``time_budget_s``, TF
    Serving's CPU kernels); one replaces the original only when it is at least
    5% faster at every batch size beyond the rounds' spread (``decide``), else
    the original is kept and the report says why. By default only candidates stock TF
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
        JSON-value properties, see tfx_bridge.artifacts.properties; the same
        run's medians, equal when the original is kept), ``decision`` (which
        model was kept and why, with the figures).

    Example:
      >>> from tfx_bridge.components import TrtOptimizer
      >>> optimizer = TrtOptimizer(model=importer.outputs["model"],  # doctest: +SKIP
      ...                          examples=example_gen.outputs["examples"])
    """

    SPEC_CLASS = TrtOptimizerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, model, examples=None, precision: str = _DEFAULTS.precision,
                 atol: float = _DEFAULTS.atol, rtol: float = _DEFAULTS.rtol,
                 topk_threshold: float = _DEFAULTS.topk_threshold,
                 iterations: int = _DEFAULTS.iterations,
                 time_budget_s: float = _DEFAULTS.time_budget_s,
                 op_denylist: Sequence[str] = _DEFAULTS.op_denylist,
                 workspace_bytes: int = _DEFAULTS.workspace_bytes,
                 minimum_segment_size: int = _DEFAULTS.minimum_segment_size,
                 maximum_cached_engines: int = _DEFAULTS.maximum_cached_engines,
                 fail_on_drift: bool = _DEFAULTS.fail_on_drift,
                 candidates: Optional[Sequence[str]] = _DEFAULTS.candidates):
        # Every check is the config's, at build time, as the CLI's and the executor's.
        config = OptimizerConfig(
            precision=precision, atol=atol, rtol=rtol, topk_threshold=topk_threshold,
            iterations=iterations, time_budget_s=time_budget_s, op_denylist=op_denylist,
            workspace_bytes=workspace_bytes, minimum_segment_size=minimum_segment_size,
            maximum_cached_engines=maximum_cached_engines, fail_on_drift=fail_on_drift,
            candidates=candidates)
        spec = TrtOptimizerSpec(model=model, examples=examples, config=config.to_json(),
                                optimized_model=channel.Channel(type=standard_artifacts.Model))
        super().__init__(spec=spec)
