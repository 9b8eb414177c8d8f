"""Pipeline definitions.

``create_data_pipeline`` is ParquetExampleGen -> StatisticsGen -> SchemaGen (or
ImportSchemaGen over schemas/) -> SchemaGuard, the data half of the full
tfx-bridge pipeline.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from tfx import v1 as tfx
from tfx.orchestration import pipeline as tfx_pipeline

from tfx_bridge.components.parquet_example_gen import ParquetExampleGen
from tfx_bridge.components.schema_guard import SchemaGuard
from tfx_bridge.pipelines import demo_data


def span_input_config(pattern: str = demo_data.SPAN_PATTERN) -> tfx.proto.Input:
    """One input split over span folders; the driver picks the latest span."""
    return tfx.proto.Input(splits=[tfx.proto.Input.Split(name="all", pattern=pattern)])


def create_data_pipeline(
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    metadata_path: Optional[str] = None,
    pattern: str = demo_data.SPAN_PATTERN,
    columns: Optional[Sequence[str]] = None,
    schema_path: Optional[str] = None,
    contract_path: Optional[str] = None,
    fail_on_anomalies: bool = True,
    beam_pipeline_args: Optional[List[str]] = None,
    enable_cache: bool = True,
) -> tfx_pipeline.Pipeline:
    """ParquetExampleGen -> StatisticsGen -> SchemaGen / ImportSchemaGen -> SchemaGuard.

    Args:
      metadata_path: SQLite MLMD file for local runs; None when the
        orchestrator supplies metadata (Kubeflow).
      schema_path: a curated schema (e.g. ``schemas.path(schemas.DEMO_SCHEMA)``)
        for ImportSchemaGen; None infers one with SchemaGen from the span.
      contract_path: the consumer contract for SchemaGuard (e.g.
        ``schemas.path(schemas.DEMO_CONTRACT)``); None checks the schema only.
    """
    example_gen = ParquetExampleGen(input_base=data_root,
                                    input_config=span_input_config(pattern),
                                    columns=columns)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    if schema_path is None:
        schema_gen = tfx.components.SchemaGen(statistics=statistics_gen.outputs["statistics"],
                                              infer_feature_shape=False)
    else:
        schema_gen = tfx.components.ImportSchemaGen(schema_file=schema_path)
    schema_guard = SchemaGuard(examples=example_gen.outputs["examples"],
                               schema=schema_gen.outputs["schema"],
                               contract_path=contract_path,
                               fail_on_anomalies=fail_on_anomalies)
    metadata = (tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata_path)
                if metadata_path else None)
    return tfx.dsl.Pipeline(
        pipeline_name=pipeline_name,
        pipeline_root=pipeline_root,
        components=[example_gen, statistics_gen, schema_gen, schema_guard],
        metadata_connection_config=metadata,
        beam_pipeline_args=beam_pipeline_args or [],
        enable_cache=enable_cache,
    )
