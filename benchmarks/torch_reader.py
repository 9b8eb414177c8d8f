"""Reader benchmark: tfx_bridge.torch.examples vs tf.data + tf.io.parse_example.

In one run, on the same gzip TFRecords, every path produces batches of torch
tensors of the same features:

  stock      tf.data.TFRecordDataset(GZIP).batch(B).map(parse_example) -> .numpy()
             -> torch.from_numpy (the obvious way to feed PyTorch from TFX Examples)
  defensive  ExamplesDataset(..., reader="defensive") (files from outside)
  tf         ExamplesDataset(..., reader="tf") (the pipeline's own Examples: what
             a run_fn gets inside PyTorchTrainer), one process
  tf x2      the same through DataLoader(num_workers=2, persistent_workers=True,
             spawn); timed on a pass after the workers started (a training run's
             later epochs; the first pass with the workers' start-up is given too)

Two record shapes: the demo's raw Examples (ingested by ParquetExampleGen's
core: 12 features with lists and strings, four read: int32 ids, float32) and
Transform-shaped records (seven scalars and the label, all read). Records per
second over whole passes, best of ``--rounds``, interleaved; then the CPU seconds
of one more pass of each, by process (the DataLoader's main process and its
workers apart), which bound what two workers can reach on a 2-core machine.
Targets: tf >= 1.0x stock in one process, tf x2 >= 1.7x stock.

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

DEMO = {"item_id": ("int32", "int64"), "hour": ("int32", "int64"),
        "price": ("float32", "float32"), "user_ctr": ("float32", "float32")}
TRANSFORMED = {"item_id": ("int32", "int64"), "hour": ("int32", "int64"),
               "country_id": ("int32", "int64"), "item_seen": ("int64", "int64"),
               "is_returning": ("int64", "int64"), "price_z": ("float32", "float32"),
               "user_ctr": ("float32", "float32"), "clicked": ("float32", "float32")}


def demo_examples(root: str, rows: int) -> str:
    from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
    from tfx_bridge.components.parquet_example_gen.plan import SplitConfig, plan_ingest
    from tfx_bridge.pipelines import demo_data

    src = os.path.join(root, "parquet")
    os.makedirs(src)
    pq.write_table(demo_data.make_span_table(1, rows), os.path.join(src, "part-0.parquet"))
    out = os.path.join(root, "examples")
    plan = plan_ingest(src, SplitConfig.parse("train:1", "*.parquet"))
    core.ingest(plan, out, lambda: beam.Pipeline(runner="DirectRunner"))
    return out


def transformed_examples(root: str, rows: int) -> str:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    split = os.path.join(root, "transformed", "Split-train")
    os.makedirs(split)
    f = tf.train.Feature
    with tf.io.TFRecordWriter(os.path.join(split, "part-0.gz"), "GZIP") as w:
        for _ in range(rows):
            feature = {k: f(int64_list=tf.train.Int64List(value=[int(rng.integers(24))]))
                       for k, (_, wire) in TRANSFORMED.items() if wire == "int64"}
            feature.update({k: f(float_list=tf.train.FloatList(value=[float(rng.random())]))
                            for k, (_, wire) in TRANSFORMED.items() if wire == "float32"})
            w.write(tf.train.Example(features=tf.train.Features(feature=feature))
                    .SerializeToString())
    return os.path.dirname(split)


def stock(examples: str, batch: int, spec: dict) -> int:
    import tensorflow as tf
    import torch

    parse = {name: tf.io.FixedLenFeature([], getattr(tf, wire))
             for name, (_, wire) in spec.items()}
    files = tf.io.gfile.glob(os.path.join(examples, "Split-train", "*.gz"))
    ds = (tf.data.TFRecordDataset(files, compression_type="GZIP").batch(batch)
          .map(lambda r: tf.io.parse_example(r, parse)))
    n = 0
    for parsed in ds:
        tensors = {k: torch.from_numpy(v.numpy().astype(spec[k][0], copy=False))
                   for k, v in parsed.items()}
        n += len(next(iter(tensors.values())))
    return n


def dataset(examples: str, batch: int, spec: dict, reader: str):
    from tfx_bridge.torch.examples import ExamplesDataset, Feature

    features = {k: Feature(dtype, wire=wire) for k, (dtype, wire) in spec.items()}
    return ExamplesDataset(examples, "train", features, batch_size=batch, reader=reader)


def count(batches) -> int:
    return sum(len(next(iter(b.values()))) for b in batches)


def measure(examples: str, rows: int, batch: int, spec: dict, rounds: int) -> dict:
    import torch

    loader = torch.utils.data.DataLoader(
        dataset(examples, batch, spec, "tf"), batch_size=None, num_workers=2,
        persistent_workers=True, multiprocessing_context="spawn")
    start = time.perf_counter()
    assert count(loader) == rows
    cold = time.perf_counter() - start
    paths = {"stock": lambda: stock(examples, batch, spec),
             "defensive": lambda: count(dataset(examples, batch, spec, "defensive")),
             "tf": lambda: count(dataset(examples, batch, spec, "tf")),
             "tf x2": lambda: count(loader)}
    best = {k: float("inf") for k in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            start = time.perf_counter()
            assert fn() == rows
            best[name] = min(best[name], time.perf_counter() - start)
    rate = {k: rows / v for k, v in best.items()}
    return {"records_per_s": {k: round(v) for k, v in rate.items()},
            "ratio_to_stock": {k: round(v / rate["stock"], 2) for k, v in rate.items()},
            "tf x2 first pass s (workers starting)": round(cold, 2),
            "cpu s a pass": cpu_seconds(examples, rows, batch, spec, loader)}


def cpu_seconds(examples: str, rows: int, batch: int, spec: dict, loader) -> dict:
    """CPU seconds of one pass, by process: where a 2-core machine's time goes."""
    import psutil

    def used(procs):
        return sum(t.user + t.system for t in (p.cpu_times() for p in procs))

    me = psutil.Process()
    workers = [psutil.Process(w.pid) for w in loader._iterator._workers]
    before = used([me]), used(workers)
    assert count(loader) == rows
    main, work = used([me]) - before[0], used(workers) - before[1]
    out = {"tf x2 main": round(main, 2), "tf x2 workers": round(work, 2)}
    for name, fn in (("tf", lambda: count(dataset(examples, batch, spec, "tf"))),
                     ("stock", lambda: stock(examples, batch, spec))):
        start = used([me])
        assert fn() == rows
        out[name] = round(used([me]) - start, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tfx-bridge-bench-reader-")
    try:
        out = {"rows": args.rows, "batch": args.batch}
        for name, make, spec in (("demo", demo_examples, DEMO),
                                 ("transformed", transformed_examples, TRANSFORMED)):
            out[name] = measure(make(root, args.rows), args.rows, args.batch, spec,
                                args.rounds)
        print(json.dumps(out, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
