"""Parquet files in, tf.Example records out: helpers shared by the
test_parquet_to_examples*.py files (importable as "parquet_helpers" once this
folder is on sys.path)."""
from __future__ import annotations

import glob
import os

import apache_beam as beam
import pyarrow.parquet as pq
import tensorflow as tf

from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
from tfx_bridge.components.parquet_example_gen.plan import SplitConfig, plan_ingest


def _direct():
    return beam.Pipeline(runner="DirectRunner")


def _write(path, table, **kwargs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, **kwargs)
    return path


def _read_examples(split_uri):
    files = sorted(glob.glob(os.path.join(split_uri, "data_tfrecord-*.gz")))
    assert files, f"no TFRecord files in {split_uri}"
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return [tf.train.Example.FromString(r.numpy()) for r in ds]


def _ingest(tmp_path, table, splits=None, columns=None, **write_kwargs):
    _write(str(tmp_path / "in" / "part-0.parquet"), table, **write_kwargs)
    split_config = splits or SplitConfig((("all", "*.parquet"),))
    plan = plan_ingest(str(tmp_path / "in"), split_config, columns=columns)
    counts = core.ingest(plan, str(tmp_path / "out"), _direct)
    return plan, counts
