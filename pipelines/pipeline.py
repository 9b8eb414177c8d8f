"""Pipeline definitions.

``create_ingest_pipeline`` is ParquetExampleGen -> StatisticsGen -> SchemaGen,
the part of the full tfx-bridge pipeline built so far.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from tfx import v1 as tfx
from tfx.orchestration import pipeline as tfx_pipeline

from tfx_bridge.components.parquet_example_gen import ParquetExampleGen
from tfx_bridge.pipelines import demo_data


def span_input_config(pattern: str = demo_data.SPAN_PATTERN) -> tfx.proto.Input:
    """One input split over span folders; the driver picks the latest span."""
    return tfx.proto.Input(splits=[tfx.proto.Input.Split(name="all", pattern=pattern)])


def create_ingest_pipeline(
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    metadata_path: Optional[str] = None,
    pattern: str = demo_data.SPAN_PATTERN,
    columns: Optional[Sequence[str]] = None,
    beam_pipeline_args: Optional[List[str]] = None,
    enable_cache: bool = True,
) -> tfx_pipeline.Pipeline:
    """ParquetExampleGen -> StatisticsGen -> SchemaGen over span folders.

    Args:
      metadata_path: SQLite MLMD file for local runs; None when the
        orchestrator supplies metadata (Kubeflow).
    """
    example_gen = ParquetExampleGen(input_base=data_root,
                                    input_config=span_input_config(pattern),
                                    columns=columns)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(statistics=statistics_gen.outputs["statistics"],
                                          infer_feature_shape=False)
    metadata = (tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata_path)
                if metadata_path else None)
    return tfx.dsl.Pipeline(
        pipeline_name=pipeline_name,
        pipeline_root=pipeline_root,
        components=[example_gen, statistics_gen, schema_gen],
        metadata_connection_config=metadata,
        beam_pipeline_args=beam_pipeline_args or [],
        enable_cache=enable_cache,
    )
