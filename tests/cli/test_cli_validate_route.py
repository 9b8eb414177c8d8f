"""``tfx-bridge validate`` writes SchemaGuard's artifact: on the same Examples, schema
and contract, the CLI and the component's executor write the same files, the same
findings and the same per-split anomalies."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tfx_bridge import cli, schemas
from tfx_bridge.components.schema_guard import report
from tfx_bridge.pipelines import demo_data


def _planted_examples(tmp_path, capfd) -> str:
    """Demo rows with item_id past int32 in two rows, ingested by the CLI."""
    table = demo_data.make_span_table(1, 200)
    item = np.asarray(table.column("item_id")).astype(np.int64)
    item[[5, 77]] = 3_000_000_000
    table = table.set_column(table.schema.get_field_index("item_id"), "item_id",
                             pa.array(item, pa.int64()))
    (tmp_path / "data").mkdir()
    pq.write_table(table, str(tmp_path / "data" / "part-0.parquet"))
    examples = str(tmp_path / "examples")
    code = cli.main(["ingest", "--input-base", str(tmp_path / "data"), "--output", examples,
                     "--quiet"])
    assert code == cli.EXIT_OK, capfd.readouterr().err
    return examples


def _run_executor(examples: str, schema_dir: str, output: str, contract: str) -> None:
    from tfx.types import artifact_utils, standard_artifacts

    from tfx_bridge.components.schema_guard.config import SchemaGuardConfig
    from tfx_bridge.components.schema_guard.executor import Executor
    from tfx_bridge.components.schema_guard.spec import (
        ANOMALIES_KEY,
        CONFIG_KEY,
        EXAMPLES_KEY,
        SCHEMA_KEY,
    )

    ex = standard_artifacts.Examples()
    ex.uri = examples
    ex.split_names = artifact_utils.encode_split_names(
        sorted(d[len("Split-"):] for d in os.listdir(examples) if d.startswith("Split-")))
    schema = standard_artifacts.Schema()
    schema.uri = schema_dir
    anomalies = standard_artifacts.ExampleAnomalies()
    anomalies.uri = output
    config = SchemaGuardConfig(contract_path=contract, fail_on_anomalies=False)
    Executor().Do({EXAMPLES_KEY: [ex], SCHEMA_KEY: [schema]}, {ANOMALIES_KEY: [anomalies]},
                  {CONFIG_KEY: config.to_json()})


def _files(root: str) -> list:
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, files in os.walk(root) for f in files)


def _anomalies(path: str):
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    proto = anomalies_pb2.Anomalies()
    proto.ParseFromString(open(path, "rb").read())
    return proto


def test_cli_validate_and_component_write_the_same_findings(tmp_path, capfd):
    examples = _planted_examples(tmp_path, capfd)
    schema_dir = tmp_path / "schema"
    schema_dir.mkdir()
    (schema_dir / "schema.pbtxt").write_text(open(schemas.path(schemas.DEMO_SCHEMA)).read())
    contract = schemas.path(schemas.DEMO_CONTRACT)
    by_component, by_cli = str(tmp_path / "component"), str(tmp_path / "cli")
    _run_executor(examples, str(schema_dir), by_component, contract)
    code = cli.main(["validate", "--examples", examples, "--schema", str(schema_dir),
                     "--contract", contract, "--output", by_cli, "--quiet"])
    assert code == cli.EXIT_CHECK_FAILED, capfd.readouterr().err

    assert _files(by_component) == _files(by_cli)
    docs = [json.load(open(os.path.join(d, report.FINDINGS_FILE)))
            for d in (by_component, by_cli)]
    for doc in docs:
        doc.pop("context")  # where each route was pointed from, in its own words
    assert docs[0] == docs[1]
    checks = {(f["check"], f["feature"]) for f in docs[1]["findings"]}
    assert ("data_vs_consumer.range", "item_id") in checks and docs[1]["blessed"] is False
    assert sum(docs[1]["records"].values()) == 200
    for split in docs[1]["splits"]:
        path = os.path.join(f"Split-{split}", report.ANOMALIES_FILE)
        assert _anomalies(os.path.join(by_component, path)) == _anomalies(
            os.path.join(by_cli, path)), split
