"""Stock Transform in the pipeline: its materialised examples feed the PyTorch reader,
and its graph maps raw records (an unseen country to the OOV bucket) as it did."""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402
import tensorflow_transform as tft  # noqa: E402

from tfx_bridge import fs, schemas, tfrecord  # noqa: E402
from tfx_bridge.pipelines import demo_data, demo_preprocessing, runner  # noqa: E402
from tfx_bridge.pipelines import pipeline as pipelines  # noqa: E402
from tfx_bridge.torch_examples import ExamplesDataset, features_from_schema  # noqa: E402


@pytest.mark.slow
def test_transform_output_feeds_torch_reader_and_maps_unseen_country_to_oov(tmp_path):
    data = str(tmp_path / "data")
    demo_data.write_demo_spans(data, spans=[1], rows_per_span=300)
    metadata = str(tmp_path / "metadata.sqlite")
    runner.run_local(pipelines.create_data_pipeline(
        "transform-test", str(tmp_path / "root"), data, metadata_path=metadata,
        schema_path=schemas.path(schemas.DEMO_SCHEMA),
        contract_path=schemas.path(schemas.DEMO_CONTRACT),
        preprocessing_module="tfx_bridge.pipelines.demo_preprocessing.preprocessing_fn"))
    graph = runner.latest_artifacts(metadata, "TransformGraph")[0]
    transformed = [a for a in runner.latest_artifacts(metadata, "Examples")
                   if "/Transform/" in a.uri][0]
    output = tft.TFTransformOutput(graph.uri)

    features = features_from_schema(output.transformed_metadata.schema,
                                    {"item_id": "int32", "hour": "int32",
                                     "country_id": "int32", "clicked": "float32"})
    assert set(features) == set(demo_preprocessing.MODEL_FEATURES) | {"clicked"}
    batches = list(ExamplesDataset(transformed.uri, "train", features, batch_size=64))
    rows = {k: torch.cat([b[k] for b in batches]).numpy() for k in features}
    vocab = output.vocabulary_size_by_name(demo_preprocessing.COUNTRY_VOCABULARY)
    assert vocab == len(demo_data.COUNTRIES)
    assert rows["country_id"].dtype == np.int32 and set(rows["country_id"]) <= set(range(vocab))
    # z-score over the analysed (train) split: mean 0, deviation 1.
    assert abs(rows["price_z"].mean()) < 1e-4 and abs(rows["price_z"].std() - 1) < 1e-3
    assert set(np.unique(rows["clicked"])) <= {0.0, 1.0}

    # The graph on raw serialized records: a country never seen maps to the OOV bucket.
    raw = [a for a in runner.latest_artifacts(metadata, "Examples")
           if "/ParquetExampleGen/" in a.uri][0]
    files = fs.glob(fs.join(raw.uri, "Split-eval", "*.gz"))
    records = next(tfrecord.read_batches(files[0], batch_size=2, limit=2)).records
    unseen = tf.train.Example.FromString(records[1])
    unseen.features.feature["country"].bytes_list.value[:] = [b"zz"]
    serialized = [records[0], unseen.SerializeToString()]
    parsed = tf.io.parse_example(serialized, output.raw_feature_spec())
    out = output.transform_features_layer()(parsed)
    known = output.vocabulary_by_name(demo_preprocessing.COUNTRY_VOCABULARY)
    first = tf.train.Example.FromString(records[0]).features.feature["country"]
    assert out["country_id"].numpy().tolist() == [
        known.index(first.bytes_list.value[0]), vocab]
    assert os.path.isdir(os.path.join(graph.uri, "transform_fn", "assets"))
