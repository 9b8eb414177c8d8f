"""TrtOptimizer's keys and ComponentSpec: one execution parameter, the JSON of
:class:`~tfx_bridge.components.trt_optimizer.config.OptimizerConfig`."""
from __future__ import annotations

from tfx.types import component_spec, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_bridge.artifacts import properties

MODEL_KEY = "model"
EXAMPLES_KEY = "examples"
OPTIMIZED_MODEL_KEY = "optimized_model"
CONFIG_KEY = "config"
# Custom properties on the optimized Model (docs/ARCHITECTURE.md).
BLESSED_PROPERTY = properties.BLESSED
BACKEND_PROPERTY = "backend"
PRECISION_PROPERTY = "precision"
REQUIRES_GPU_PROPERTY = properties.REQUIRES_GPU
SERVING_FLAGS_PROPERTY = properties.SERVING_FLAGS
LATENCY_BEFORE_PROPERTY = properties.LATENCY_BEFORE
LATENCY_AFTER_PROPERTY = properties.LATENCY_AFTER
DECISION_PROPERTY = "decision"  # which model was kept and why, with the rule's figures


class TrtOptimizerSpec(component_spec.ComponentSpec):
    """Model (+ Examples) -> optimized Model (Format-Serving)."""

    PARAMETERS = {CONFIG_KEY: ExecutionParameter(type=str)}
    INPUTS = {
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS = {OPTIMIZED_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}
