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

Record shapes (``--schemas``; the reader was tuned on the first two only):

  demo         the demo's raw Examples (ingested by ParquetExampleGen's core: 12
               features with lists and strings; four read: int32 ids, float32)
  transformed  Transform-shaped records: seven scalars and the label, all read
  heldout      int64 ids (one read as int32), float scalars, a fixed-length float
               list of 4, a 0/1 int read as a float32 label
  narrow       40 float32 scalars
  wide         a float32 list of 256 and three ints (one read as int32)
  strings      two bytes features (a country, five tokens) beside three numeric
               ones; the numeric ones are read (the reader refuses strings)

Records per second over whole passes, ``--rounds`` rounds, each path once a
round, interleaved (the order reversed every other round); per path the best,
median and worst round, and per round the ratio to the stock pass of the same
round (its spread). With ``tf x2`` among ``--paths``, the CPU seconds of one more
pass of each, by process (the DataLoader's main process and its workers apart),
which bound what two workers can reach on a 2-core machine.
Targets: tf >= 1.0x stock in one process on every shape, tf x2 >= 1.7x stock.

    .venv/bin/python benchmarks/torch_reader.py --rows 200000
    .venv/bin/python benchmarks/torch_reader.py --rows 50000 --schemas heldout --paths stock,tf
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import apache_beam as beam  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

# name -> (tensor dtype, wire type, values per record)
DEMO = {"item_id": ("int32", "int64", 1), "hour": ("int32", "int64", 1),
        "price": ("float32", "float32", 1), "user_ctr": ("float32", "float32", 1)}
TRANSFORMED = {"item_id": ("int32", "int64", 1), "hour": ("int32", "int64", 1),
               "country_id": ("int32", "int64", 1), "item_seen": ("int64", "int64", 1),
               "is_returning": ("int64", "int64", 1), "price_z": ("float32", "float32", 1),
               "user_ctr": ("float32", "float32", 1), "clicked": ("float32", "float32", 1)}
HELDOUT = {"user_id": ("int64", "int64", 1), "item_id": ("int32", "int64", 1),
           "ad_id": ("int64", "int64", 1), "price": ("float32", "float32", 1),
           "ctr": ("float32", "float32", 1), "dwell_s": ("float32", "float32", 1),
           "embedding": ("float32", "float32", 4), "clicked": ("float32", "int64", 1)}
NARROW = {f"f{i:02d}": ("float32", "float32", 1) for i in range(40)}
WIDE = {"pixels": ("float32", "float32", 256), "label": ("int64", "int64", 1),
        "item_id": ("int32", "int64", 1), "user_id": ("int64", "int64", 1)}
STRINGS = {"item_id": ("int32", "int64", 1), "price": ("float32", "float32", 1),
           "clicked": ("float32", "int64", 1)}

# Values a record holds, by feature: (rng, n, length) -> array [n, length].
_INT64_IDS = lambda r, n, k: r.integers(0, 2**48, (n, k))  # noqa: E731
_INT32_IDS = lambda r, n, k: r.integers(0, 2**31 - 1, (n, k))  # noqa: E731
_BIT = lambda r, n, k: r.integers(0, 2, (n, k))  # noqa: E731
_FLOAT = lambda r, n, k: r.standard_normal((n, k)).astype(np.float32)  # noqa: E731
_SMALL = lambda r, n, k: r.integers(0, 24, (n, k))  # noqa: E731
VALUES = {
    "transformed": {"item_id": _SMALL, "hour": _SMALL, "country_id": _SMALL,
                    "item_seen": _SMALL, "is_returning": _SMALL},
    "heldout": {"user_id": _INT64_IDS, "item_id": _INT32_IDS, "ad_id": _INT64_IDS,
                "clicked": _BIT},
    "wide": {"label": _BIT, "item_id": _INT32_IDS, "user_id": _INT64_IDS},
    "strings": {"item_id": _INT32_IDS, "clicked": _BIT},
}


def demo_examples(root: str, rows: int, _spec: dict) -> str:
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


def synthetic_examples(name: str):
    """Generated records of one shape, one gzip file a split (as Transform writes)."""
    def make(root: str, rows: int, spec: dict) -> str:
        import tensorflow as tf

        rng = np.random.default_rng(0)
        columns = {k: VALUES.get(name, {}).get(k, _FLOAT)(rng, rows, length).tolist()
                   for k, (_, _, length) in spec.items()}
        if name == "strings":
            words = np.array([b"de", b"fr", b"us", b"jp", b"br"], dtype=object)
            columns["country"] = words[rng.integers(0, 5, (rows, 1))].tolist()
            columns["tokens"] = words[rng.integers(0, 5, (rows, 5))].tolist()
        split = os.path.join(root, name, "Split-train")
        os.makedirs(split)
        f = tf.train.Feature
        kinds = {k: "float_list" if wire == "float32" else "int64_list"
                 for k, (_, wire, _) in spec.items()}
        lists = {"float_list": tf.train.FloatList, "int64_list": tf.train.Int64List,
                 "bytes_list": tf.train.BytesList}
        with tf.io.TFRecordWriter(os.path.join(split, "part-0.gz"), "GZIP") as w:
            for i in range(rows):
                feature = {k: f(**{kinds.get(k, "bytes_list"): lists[
                    kinds.get(k, "bytes_list")](value=v[i])}) for k, v in columns.items()}
                w.write(tf.train.Example(features=tf.train.Features(feature=feature))
                        .SerializeToString())
        return os.path.dirname(split)
    return make


SCHEMAS = {"demo": (demo_examples, DEMO),
           "transformed": (synthetic_examples("transformed"), TRANSFORMED),
           "heldout": (synthetic_examples("heldout"), HELDOUT),
           "narrow": (synthetic_examples("narrow"), NARROW),
           "wide": (synthetic_examples("wide"), WIDE),
           "strings": (synthetic_examples("strings"), STRINGS)}
PATHS = ("stock", "defensive", "tf", "tf x2")


def stock(examples: str, batch: int, spec: dict) -> int:
    import tensorflow as tf
    import torch

    parse = {name: tf.io.FixedLenFeature([] if length == 1 else [length], getattr(tf, wire))
             for name, (_, wire, length) in spec.items()}
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

    features = {k: Feature(dtype, length, wire) for k, (dtype, wire, length) in spec.items()}
    return ExamplesDataset(examples, "train", features, batch_size=batch, reader=reader)


def count(batches) -> int:
    return sum(len(next(iter(b.values()))) for b in batches)


def spread(values) -> dict:
    return {"best": max(values), "median": statistics.median(values), "worst": min(values)}


def measure(examples: str, rows: int, batch: int, spec: dict, rounds: int,
            paths: list) -> dict:
    import torch

    out = {}
    fns = {"stock": lambda: stock(examples, batch, spec),
           "defensive": lambda: count(dataset(examples, batch, spec, "defensive")),
           "tf": lambda: count(dataset(examples, batch, spec, "tf"))}
    loader = None
    if "tf x2" in paths:
        loader = torch.utils.data.DataLoader(
            dataset(examples, batch, spec, "tf"), batch_size=None, num_workers=2,
            persistent_workers=True, multiprocessing_context="spawn")
        start = time.perf_counter()
        assert count(loader) == rows
        out["tf x2 first pass s (workers starting)"] = round(time.perf_counter() - start, 2)
        fns["tf x2"] = lambda: count(loader)
    rates = {k: [] for k in paths}
    for r in range(rounds):
        for name in (paths if r % 2 == 0 else paths[::-1]):
            start = time.perf_counter()
            assert fns[name]() == rows
            rates[name].append(rows / (time.perf_counter() - start))
    out["records_per_s"] = {k: {s: round(v) for s, v in spread(rates[k]).items()}
                            for k in paths}
    out["ratio_to_stock"] = {
        k: {s: round(v, 2) for s, v in spread(
            [a / b for a, b in zip(rates[k], rates["stock"], strict=True)]).items()}
        for k in paths if k != "stock"}
    if loader is not None:
        out["cpu s a pass"] = cpu_seconds(examples, rows, batch, spec, loader)
    return out


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
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--schemas", default=",".join(SCHEMAS),
                        help=f"comma-separated, of {', '.join(SCHEMAS)}")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help=f"comma-separated, of {', '.join(PATHS)} (stock is always run)")
    args = parser.parse_args()
    schemas = args.schemas.split(",")
    paths = ["stock"] + [p for p in args.paths.split(",") if p != "stock"]
    unknown = sorted(set(schemas) - set(SCHEMAS)) + sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"unknown schemas or paths {unknown}")
    root = tempfile.mkdtemp(prefix="tfx-bridge-bench-reader-")
    try:
        out = {"rows": args.rows, "batch": args.batch, "rounds": args.rounds,
               "load average before": os.getloadavg()}
        for name in schemas:
            make, spec = SCHEMAS[name]
            out[name] = measure(make(root, args.rows, spec), args.rows, args.batch, spec,
                                args.rounds, paths)
        out["load average after"] = os.getloadavg()
        print(json.dumps(out, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
