"""PyTorchModelImporter's keys and ComponentSpec: one execution parameter, the JSON of
:class:`~tfx_bridge.components.pytorch_model_importer.config.ImporterConfig`."""
from __future__ import annotations

from tfx.types import artifact_utils, component_spec, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_bridge.artifacts import properties

SOURCE_MODEL_KEY = "source_model"
SCHEMA_KEY = "schema"
EXAMPLES_KEY = "examples"
TRANSFORM_GRAPH_KEY = "transform_graph"
TRANSFORMED_EXAMPLES_KEY = "transformed_examples"
MODEL_KEY = "model"
CONFIG_KEY = "config"
# Custom properties on the Model artifact (docs/ARCHITECTURE.md).
BLESSED_PROPERTY = properties.BLESSED
SOURCE_PROPERTY = "source"
MAX_ABS_ERROR_PROPERTY = properties.MAX_ABS_ERROR
REWRITES_PROPERTY = properties.REWRITES
CONVERTER_PROPERTY = "converter"
TFX_VERSION_PROPERTY = artifact_utils.ARTIFACT_TFX_VERSION_CUSTOM_PROPERTY_KEY


class PyTorchModelImporterSpec(component_spec.ComponentSpec):
    """A model file (+ optional Schema, Examples) -> Model (Format-Serving)."""

    PARAMETERS = {CONFIG_KEY: ExecutionParameter(type=str)}
    INPUTS = {
        SOURCE_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
        SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema, optional=True),
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
        TRANSFORM_GRAPH_KEY: ChannelParameter(type=standard_artifacts.TransformGraph,
                                              optional=True),
        TRANSFORMED_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples,
                                                   optional=True),
    }
    OUTPUTS = {MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}
