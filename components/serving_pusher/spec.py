"""ServingPusher's keys and ComponentSpec: one execution parameter, the JSON of
:class:`~tfx_bridge.components.serving_pusher.config.PusherConfig`."""
from __future__ import annotations

from tfx.types import component_spec, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_bridge.artifacts import properties

MODEL_KEY = "model"
IMPORTED_MODEL_KEY = "imported_model"
SCHEMA_GUARD_KEY = "schema_guard"
MODEL_BLESSING_KEY = "model_blessing"
INFRA_BLESSING_KEY = "infra_blessing"
EXAMPLES_KEY = "examples"
PUSHED_MODEL_KEY = "pushed_model"
CONFIG_KEY = "config"
# The stock PushedModel properties, and ours.
PUSHED_PROPERTY = "pushed"
PUSHED_DESTINATION_PROPERTY = "pushed_destination"
PUSHED_VERSION_PROPERTY = "pushed_version"
REASON_PROPERTY = "push_reason"
BLESSED_PROPERTY = properties.BLESSED


class ServingPusherSpec(component_spec.ComponentSpec):
    """Model + any blessings (+ Examples for warmup) -> PushedModel."""

    PARAMETERS = {CONFIG_KEY: ExecutionParameter(type=str)}
    INPUTS = {
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        IMPORTED_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
        SCHEMA_GUARD_KEY: ChannelParameter(type=standard_artifacts.ExampleAnomalies,
                                           optional=True),
        MODEL_BLESSING_KEY: ChannelParameter(type=standard_artifacts.ModelBlessing,
                                             optional=True),
        INFRA_BLESSING_KEY: ChannelParameter(type=standard_artifacts.InfraBlessing,
                                             optional=True),
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS = {PUSHED_MODEL_KEY: ChannelParameter(type=standard_artifacts.PushedModel)}
