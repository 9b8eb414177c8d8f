"""ParquetExampleGen's keys and ComponentSpec: FileBasedExampleGen's own parameters
(the stock driver reads them) plus one, the JSON of
:class:`~tfx_bridge.components.parquet_example_gen.config.ParquetConfig`."""
from __future__ import annotations

from tfx.types import standard_component_specs
from tfx.types.component_spec import ExecutionParameter

INPUT_BASE_KEY = standard_component_specs.INPUT_BASE_KEY
INPUT_CONFIG_KEY = standard_component_specs.INPUT_CONFIG_KEY
OUTPUT_CONFIG_KEY = standard_component_specs.OUTPUT_CONFIG_KEY
RANGE_CONFIG_KEY = standard_component_specs.RANGE_CONFIG_KEY
OUTPUT_DATA_FORMAT_KEY = standard_component_specs.OUTPUT_DATA_FORMAT_KEY
OUTPUT_FILE_FORMAT_KEY = standard_component_specs.OUTPUT_FILE_FORMAT_KEY
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
CONFIG_KEY = "config"
# Custom properties recorded on the Examples artifact.
SOURCE_SCHEMA_PROPERTY = "source_schema"
NUM_ROWS_PROPERTY = "num_rows"


class ParquetExampleGenSpec(standard_component_specs.FileBasedExampleGenSpec):
    """FileBasedExampleGen's spec plus our config (column projection, batch size)."""

    PARAMETERS = {
        **standard_component_specs.FileBasedExampleGenSpec.PARAMETERS,
        CONFIG_KEY: ExecutionParameter(type=str),
    }
