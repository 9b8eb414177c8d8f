"""``tfx-bridge ingest`` writes ParquetExampleGen's artifact: on the same Parquet
files and settings, the CLI and the component's executor write the same files per
split, the same records in each split and the same source schema."""
from __future__ import annotations

import glob
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from tfx_bridge import cli
from tfx_bridge.components.parquet_example_gen.arrow_types import SOURCE_SCHEMA_FILE

SPLITS = (("train", 3), ("eval", 1), ("test", 1))
COLUMNS = ["id", "score", "tags"]


def _parquet(folder) -> None:
    """Two files, several row groups, nulls, an empty list and a column left out."""
    folder.mkdir()
    for part in range(2):
        ids = list(range(part * 150, part * 150 + 150))
        table = pa.table({
            "id": pa.array(ids, pa.int64()),
            "score": pa.array([None if i % 17 == 0 else i / 8 for i in ids], pa.float64()),
            "tags": pa.array([[] if i % 5 == 0 else [f"t{i % 3}", "x"] for i in ids],
                             pa.list_(pa.string())),
            "unused": pa.array([b"\x00"] * len(ids), pa.binary()),
        })
        pq.write_table(table, str(folder / f"part-{part}.parquet"), row_group_size=40)


def _run_executor(input_base: str, output: str) -> None:
    from tfx.proto import example_gen_pb2
    from tfx.types import standard_artifacts
    from tfx.utils import proto_utils

    from tfx_bridge.components.parquet_example_gen.config import DEFAULT_PATTERN, ParquetConfig
    from tfx_bridge.components.parquet_example_gen.executor import Executor
    from tfx_bridge.components.parquet_example_gen.spec import (
        CONFIG_KEY,
        EXAMPLES_KEY,
        INPUT_BASE_KEY,
        INPUT_CONFIG_KEY,
        OUTPUT_CONFIG_KEY,
    )

    input_config = example_gen_pb2.Input(splits=[
        example_gen_pb2.Input.Split(name="single_split", pattern=DEFAULT_PATTERN)])
    output_config = example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
        example_gen_pb2.SplitConfig.Split(name=n, hash_buckets=b) for n, b in SPLITS]))
    examples = standard_artifacts.Examples()
    examples.uri = output
    Executor().Do({}, {EXAMPLES_KEY: [examples]}, {
        INPUT_BASE_KEY: input_base,
        INPUT_CONFIG_KEY: proto_utils.proto_to_json(input_config),
        OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(output_config),
        CONFIG_KEY: ParquetConfig(columns=COLUMNS, batch_size=64).to_json()})


def _records(split_dir: str) -> list:
    """The split's records as sorted canonical dicts: tfx_bsl's encoder orders a
    record's features differently from process to process, so bytes may differ."""
    import tensorflow as tf

    out = []
    files = sorted(glob.glob(os.path.join(split_dir, "*")))
    for raw in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        example = tf.train.Example.FromString(raw.numpy())
        record = {}
        for name, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            record[name] = (kind, list(getattr(feature, kind).value))
        out.append(json.dumps(record, sort_keys=True, default=repr))
    return sorted(out)


def _files(root: str) -> list:
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, files in os.walk(root) for f in files)


def test_cli_ingest_and_component_write_the_same_splits(tmp_path, capfd):
    _parquet(tmp_path / "data")
    by_component, by_cli = str(tmp_path / "component"), str(tmp_path / "cli")
    _run_executor(str(tmp_path / "data"), by_component)
    code = cli.main(["ingest", "--input-base", str(tmp_path / "data"), "--output", by_cli,
                     "--splits", ",".join(f"{n}:{b}" for n, b in SPLITS),
                     "--columns", ",".join(COLUMNS), "--batch-size", "64", "--quiet"])
    assert code == cli.EXIT_OK, capfd.readouterr().err

    assert _files(by_component) == _files(by_cli)
    total = 0
    for name, _ in SPLITS:
        a = _records(os.path.join(by_component, f"Split-{name}"))
        b = _records(os.path.join(by_cli, f"Split-{name}"))
        assert a == b and a, name
        total += len(a)
    assert total == 300
    assert "unused" not in _records(os.path.join(by_cli, "Split-train"))[0]
    schemas = [json.load(open(os.path.join(d, SOURCE_SCHEMA_FILE)))
               for d in (by_component, by_cli)]
    assert schemas[0] == schemas[1]
