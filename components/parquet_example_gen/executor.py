"""ParquetExampleGen executor: unpack artifacts, run the core, record properties."""
from __future__ import annotations

import json
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.components.example_gen import write_split
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.utils import proto_utils

from tfx_bridge import beam as beam_options
from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
from tfx_bridge.components.parquet_example_gen.config import ParquetConfig
from tfx_bridge.components.parquet_example_gen.errors import ParquetConfigError
from tfx_bridge.components.parquet_example_gen.plan import SplitConfig, plan_ingest
from tfx_bridge.components.parquet_example_gen.spec import (
    CONFIG_KEY,
    EXAMPLES_KEY,
    INPUT_BASE_KEY,
    INPUT_CONFIG_KEY,
    NUM_ROWS_PROPERTY,
    OUTPUT_CONFIG_KEY,
    OUTPUT_DATA_FORMAT_KEY,
    OUTPUT_FILE_FORMAT_KEY,
    SOURCE_SCHEMA_PROPERTY,
)


def split_config_from_protos(input_config: example_gen_pb2.Input,
                             output_config: example_gen_pb2.Output) -> SplitConfig:
    """TFX's Input/Output protos as the core's SplitConfig (same split rules)."""
    splits = output_config.split_config
    return SplitConfig(
        input_patterns=tuple((s.name, s.pattern) for s in input_config.splits),
        output_splits=tuple((s.name, s.hash_buckets) for s in splits.splits),
        partition_feature=splits.partition_feature_name or None,
    )


class Executor(base_beam_executor.BaseBeamExecutor):
    """Writes Split-*/ gzip TFRecords of tf.Examples from Parquet row groups."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        input_config = example_gen_pb2.Input()
        proto_utils.json_to_proto(exec_properties[INPUT_CONFIG_KEY],
                                  input_config)
        output_config = example_gen_pb2.Output()
        proto_utils.json_to_proto(exec_properties[OUTPUT_CONFIG_KEY],
                                  output_config)
        payload = exec_properties.get(OUTPUT_DATA_FORMAT_KEY)
        if payload not in (None, example_gen_pb2.FORMAT_TF_EXAMPLE):
            raise ParquetConfigError(
                f"ParquetExampleGen writes tf.Example only; output_data_format={payload}.")
        file_format = exec_properties.get(OUTPUT_FILE_FORMAT_KEY)
        if file_format not in (None, example_gen_pb2.FORMAT_TFRECORDS_GZIP):
            raise ParquetConfigError(
                f"ParquetExampleGen writes gzip TFRecords only; output_file_format={file_format}.")
        config = ParquetConfig.from_json(exec_properties[CONFIG_KEY])
        # Planning lists and reads footers through Beam's FileSystems outside a pipeline;
        # its S3 filesystem needs the run's options (endpoint, region) there too.
        beam_options.set_filesystem_options(self._beam_pipeline_args or [])
        plan = plan_ingest(
            exec_properties[INPUT_BASE_KEY],
            split_config_from_protos(input_config, output_config),
            columns=config.columns, batch_size=config.batch_size)

        examples = artifact_utils.get_single_instance(
            output_dict[EXAMPLES_KEY])
        examples.split_names = artifact_utils.encode_split_names(plan.splits.split_names)
        logging.info("ParquetExampleGen: %d rows in %d files -> splits %s",
                     plan.num_rows, len(plan.files), plan.splits.split_names)
        counts = core.ingest(plan, examples.uri, self._make_beam_pipeline,
                             allow_empty_splits=config.allow_empty_splits)
        logging.info("ParquetExampleGen wrote %s", counts)

        examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
        examples_utils.set_file_format(
            examples, write_split.to_file_format_str(example_gen_pb2.FORMAT_TFRECORDS_GZIP))
        examples.set_string_custom_property(
            SOURCE_SCHEMA_PROPERTY, json.dumps(plan.source_schema()["columns"], sort_keys=True))
        examples.set_int_custom_property(NUM_ROWS_PROPERTY, sum(counts.values()))
