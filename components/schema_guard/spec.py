"""SchemaGuard's keys and ComponentSpec: one execution parameter, the JSON of
:class:`~tfx_bridge.components.schema_guard.config.SchemaGuardConfig`."""
from __future__ import annotations

from tfx.types import component_spec, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_bridge.artifacts import properties

EXAMPLES_KEY = "examples"
SCHEMA_KEY = "schema"
MODEL_KEY = "model"
ANOMALIES_KEY = "anomalies"
CONFIG_KEY = "config"
# Custom properties on the ExampleAnomalies artifact.
BLESSED_PROPERTY = properties.BLESSED
FINDINGS_PROPERTY = "findings"


class SchemaGuardSpec(component_spec.ComponentSpec):
    """Examples + Schema (+ optional Model / contract file) -> ExampleAnomalies."""

    PARAMETERS = {CONFIG_KEY: ExecutionParameter(type=str)}
    INPUTS = {
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema),
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS = {
        ANOMALIES_KEY: ChannelParameter(type=standard_artifacts.ExampleAnomalies),
    }
