"""Reader benchmark: tfx_bridge.torch.examples vs tf.data + tf.io.parse_example.

In one run, on the same gzip TFRecords (demo click-through Examples, ingested
once by ParquetExampleGen's core: int64 ids, floats, a string), both produce
batches of torch tensors of the same four features:

  stock  tf.data.TFRecordDataset(GZIP).batch(B).map(parse_example) -> .numpy()
         -> torch.from_numpy (the obvious way to feed PyTorch from TFX Examples)
  ours   ExamplesDataset(..., batch_size=B) (one reader; no DataLoader workers)

Records per second over whole passes, best of three each, interleaved.
Target (issue 15): ours at least 3x the stock path.

    .venv/bin/python benchmarks/torch_reader.py --rows 300000
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import apache_beam as beam  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

FEATURES = {"item_id": ("int32", "int64"), "hour": ("int32", "int64"),
            "price": ("float32", "float32"), "user_ctr": ("float32", "float32")}


def make_examples(root: str, rows: int) -> str:
    from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
    from tfx_bridge.pipelines import demo_data

    src = os.path.join(root, "parquet")
    os.makedirs(src)
    pq.write_table(demo_data.make_span_table(1, rows), os.path.join(src, "part-0.parquet"))
    out = os.path.join(root, "examples")
    plan = core.plan_ingest(src, core.SplitConfig.parse("train:1", "*.parquet"))
    core.ingest(plan, out, lambda: beam.Pipeline(runner="DirectRunner"))
    return out


def stock(examples: str, batch: int) -> int:
    import tensorflow as tf
    import torch

    spec = {name: tf.io.FixedLenFeature([], getattr(tf, wire))
            for name, (_, wire) in FEATURES.items()}
    files = tf.io.gfile.glob(os.path.join(examples, "Split-train", "*.gz"))
    ds = (tf.data.TFRecordDataset(files, compression_type="GZIP").batch(batch)
          .map(lambda r: tf.io.parse_example(r, spec)))
    n = 0
    for parsed in ds:
        tensors = {k: torch.from_numpy(v.numpy().astype(FEATURES[k][0], copy=False))
                   for k, v in parsed.items()}
        n += len(tensors["price"])
    return n


def ours(examples: str, batch: int) -> int:
    from tfx_bridge.torch.examples import ExamplesDataset, Feature

    features = {k: Feature(dtype, wire=wire) for k, (dtype, wire) in FEATURES.items()}
    return sum(len(b["price"]) for b in ExamplesDataset(examples, "train", features,
                                                         batch_size=batch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tfx-bridge-bench-reader-")
    try:
        examples = make_examples(root, args.rows)
        best = {"stock": float("inf"), "ours": float("inf")}
        for _ in range(args.rounds):
            for name, fn in (("stock", stock), ("ours", ours)):
                start = time.perf_counter()
                assert fn(examples, args.batch) == args.rows
                best[name] = min(best[name], time.perf_counter() - start)
        rate = {k: args.rows / v for k, v in best.items()}
        print(json.dumps({"rows": args.rows, "batch": args.batch,
                          "records_per_s": {k: round(v) for k, v in rate.items()},
                          "ratio": round(rate["ours"] / rate["stock"], 2)}))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
