"""Local runs (LocalDagRunner + Beam DirectRunner, MLMD in SQLite) and their results."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from tfx import v1 as tfx
from tfx.orchestration import metadata as tfx_metadata
from tfx.types import artifact_utils

from tfx_bridge import schemas
from tfx_bridge.components.parquet_example_gen import executor as peg_executor
from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
from tfx_bridge.pipelines import pipeline as pipelines

DEMO_PIPELINE_NAME = "tfx-bridge-demo"
METADATA_FILE = "metadata.sqlite"
PIPELINE_ROOT_DIR = "pipeline_root"


def run_local(pipeline) -> None:
    """Runs a TFX pipeline with LocalDagRunner (components in topological order)."""
    tfx.orchestration.LocalDagRunner().run(pipeline)


def latest_artifacts(metadata_path: str, type_name: str) -> List[Any]:
    """Artifacts of a type in an MLMD SQLite store, newest first."""
    config = tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata_path)
    with tfx_metadata.Metadata(config) as m:
        found = m.store.get_artifacts_by_type(type_name)
    return sorted(found, key=lambda a: a.id, reverse=True)


def _custom(artifact, key: str) -> Optional[Any]:
    if key not in artifact.custom_properties:
        return None
    value = artifact.custom_properties[key]
    return value.string_value if value.HasField("string_value") else value.int_value


def run_data_demo(workdir: str, data_root: str,
                  beam_pipeline_args: Optional[List[str]] = None,
                  contract_path: Optional[str] = None) -> Dict[str, Any]:
    """Runs the data pipeline on ``data_root`` and summarises the latest outputs.

    The consumer contract defaults to the demo model's (schemas/demo.contract.yaml).
    """
    metadata_path = os.path.join(workdir, METADATA_FILE)
    pipeline = pipelines.create_data_pipeline(
        DEMO_PIPELINE_NAME, os.path.join(workdir, PIPELINE_ROOT_DIR), data_root,
        metadata_path=metadata_path, beam_pipeline_args=beam_pipeline_args,
        contract_path=contract_path or schemas.path(schemas.DEMO_CONTRACT))
    run_local(pipeline)
    examples = latest_artifacts(metadata_path, "Examples")[0]
    schema = latest_artifacts(metadata_path, "Schema")[0]
    anomalies = latest_artifacts(metadata_path, "ExampleAnomalies")[0]
    split_names = artifact_utils.decode_split_names(
        examples.properties["split_names"].string_value)
    with open(os.path.join(examples.uri, core.SOURCE_SCHEMA_FILE)) as f:
        source = json.load(f)
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.utils import io_utils
    schema_proto = io_utils.parse_pbtxt_file(os.path.join(schema.uri, "schema.pbtxt"),
                                             schema_pb2.Schema())
    return {
        "examples_uri": examples.uri,
        "span": _custom(examples, "span"),
        "num_rows": _custom(examples, peg_executor.NUM_ROWS_PROPERTY),
        "splits": {name: core.count_records(core.split_dir(examples.uri, name))
                   for name in split_names},
        "columns": source["columns"],
        "schema_uri": schema.uri,
        "schema_features": len(schema_proto.feature),
        "metadata": metadata_path,
        "anomalies_uri": anomalies.uri,
        "schema_guard_blessed": _custom(anomalies, "blessed"),
        "schema_guard_findings": _custom(anomalies, "findings"),
    }
