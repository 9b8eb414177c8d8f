"""ParquetExampleGen as a TFX component: LocalDagRunner, spans, Kubeflow V2 compile."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from tfx import v1 as tfx
from tfx.components.example_gen.component import FileBasedExampleGen

from tfx_bridge.components.parquet_example_gen import ParquetExampleGen
from tfx_bridge.components.parquet_example_gen.arrow_types import SOURCE_SCHEMA_FILE
from tfx_bridge.components.parquet_example_gen.errors import (
    ParquetConfigError,
    ParquetDataError,
)
from tfx_bridge.pipelines import demo_data, runner
from tfx_bridge.pipelines import pipeline as pipelines


def _examples_in(split_uri):
    files = tf.io.gfile.glob(os.path.join(split_uri, "*.gz"))
    return [tf.train.Example.FromString(r.numpy())
            for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


@pytest.mark.slow
def test_pipeline_statistics_and_schema_consume_examples(demo_run):
    schema_path = os.path.join(demo_run["schema_uri"], "schema.pbtxt")
    assert os.path.exists(schema_path)
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.utils import io_utils
    schema = io_utils.parse_pbtxt_file(schema_path, schema_pb2.Schema())
    types = {f.name: schema_pb2.FeatureType.Name(f.type) for f in schema.feature}
    assert types["hist_items"] == "INT" and types["price"] == "FLOAT"
    assert types["country"] == "BYTES" and types["clicked"] == "INT"
    assert set(types) == set(demo_data.demo_schema().names)
    stats = runner.latest_artifacts(demo_run["metadata"], "ExampleStatistics")
    assert stats and os.path.exists(os.path.join(stats[0].uri, "Split-train",
                                                 "FeatureStats.pb"))


@pytest.mark.slow
def test_pipeline_latest_span_selected(demo_run):
    assert demo_run["span"] == 2
    examples = _examples_in(os.path.join(demo_run["examples_uri"], "Split-train"))
    examples += _examples_in(os.path.join(demo_run["examples_uri"], "Split-eval"))
    assert len(examples) == 600 == sum(demo_run["splits"].values())
    day_ms = (20_000 + 2) * 86_400_000  # demo_data puts span n on day 20000 + n
    times = {e.features.feature["event_time"].int64_list.value[0] // 86_400_000 * 86_400_000
             for e in examples}
    assert times == {day_ms}


@pytest.mark.slow
def test_pipeline_artifact_properties_recorded(demo_run):
    artifact = runner.latest_artifacts(demo_run["metadata"], "Examples")[0]
    custom = artifact.custom_properties
    assert custom["payload_format"].string_value == "FORMAT_TF_EXAMPLE"
    assert custom["file_format"].string_value == "tfrecords_gzip"
    assert custom["span"].int_value == 2
    assert json.loads(artifact.properties["split_names"].string_value) == ["train", "eval"]
    source = json.loads(custom["source_schema"].string_value)
    assert source["item_id"]["arrow_type"] == "int32"
    with open(os.path.join(artifact.uri, SOURCE_SCHEMA_FILE)) as f:
        assert json.load(f)["columns"] == source


@pytest.mark.slow
def test_pipeline_bad_data_fails_run_with_typed_error(tmp_path):
    data = tmp_path / "data" / "span-1"
    data.mkdir(parents=True)
    pq.write_table(pa.table({"hist": pa.array([[1], [None, 2]], pa.list_(pa.int32()))}),
                   str(data / "part-0.parquet"))
    p = pipelines.create_data_pipeline("bad", str(tmp_path / "root"), str(tmp_path / "data"),
                                         metadata_path=str(tmp_path / "m.sqlite"))
    with pytest.raises(ParquetDataError,
                       match=r"Column 'hist' in span-1/part-0\.parquet \(row 1\): null inside"):
        runner.run_local(p)


def test_component_build_bad_columns_refused():
    with pytest.raises(ParquetConfigError, match=r"columns must be a list of strings, got 'a,b'"):
        ParquetExampleGen(input_base="/x", columns="a,b")
    with pytest.raises(ParquetConfigError, match=r"columns has duplicates"):
        ParquetExampleGen(input_base="/x", columns=["a", "a"])
    with pytest.raises(ParquetConfigError, match=r"batch_size must be a positive int"):
        ParquetExampleGen(input_base="/x", batch_size=0)


def test_component_partition_feature_outside_columns_refused():
    output = tfx.proto.Output(split_config=tfx.proto.SplitConfig(
        splits=[tfx.proto.SplitConfig.Split(name="train", hash_buckets=1)],
        partition_feature_name="user"))
    with pytest.raises(ParquetConfigError, match=r"'user' is not among columns \['item'\]"):
        ParquetExampleGen(input_base="/x", output_config=output, columns=["item"])


def test_component_defaults_match_stock_examplegen():
    gen = ParquetExampleGen(input_base="/x")
    props = gen.exec_properties
    assert json.loads(props["output_config"])["split_config"]["splits"] == [
        {"name": "train", "hash_buckets": 2}, {"name": "eval", "hash_buckets": 1}]
    assert json.loads(props["config"]) == {"columns": None, "batch_size": 20_000,
                                          "allow_empty_splits": False}
    assert gen.outputs["examples"].type_name == "Examples"
    assert isinstance(gen, FileBasedExampleGen)


@pytest.mark.slow
def test_kubeflow_v2_compile_uses_stock_driver_and_our_executor(tmp_path):
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

    p = pipelines.create_data_pipeline("kfp-ingest", "gs://bucket/root", "gs://bucket/data",
                                         columns=["user_id", "clicked"])
    config = kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
        default_image="example.com/tfx-bridge:test")
    kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=config, output_dir=str(tmp_path), output_filename="pipeline.json").run(p)
    spec = json.loads((tmp_path / "pipeline.json").read_text())["pipelineSpec"]
    executors = spec["deploymentSpec"]["executors"]
    gen_exec = executors["ParquetExampleGen_executor"]["container"]
    assert "tfx_bridge.components.parquet_example_gen.executor.Executor" in gen_exec["args"]
    # The stock file-based driver resolves {SPAN} before the executor runs.
    driver = gen_exec["lifecycle"]["preCacheCheck"]["command"]
    assert driver[-1] == "tfx.orchestration.kubeflow.v2.file_based_example_gen.driver"
    task_params = spec["root"]["dag"]["tasks"]["ParquetExampleGen"]["inputs"]["parameters"]
    config = task_params["config"]["runtimeValue"]["constantValue"]["stringValue"]
    assert json.loads(config)["columns"] == ["user_id", "clicked"]
    assert "span-{SPAN}" in task_params["input_config"]["runtimeValue"]["constantValue"][
        "stringValue"]
    assert set(spec["root"]["dag"]["tasks"]) == {"ParquetExampleGen", "StatisticsGen",
                                                 "SchemaGen", "SchemaGuard"}
