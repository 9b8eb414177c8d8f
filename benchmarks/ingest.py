"""Ingestion benchmark: stock TFX Parquet path vs ParquetExampleGen vs a plain-loop bound.

In one run, on the same generated files (mixed types incl. list<int32>):
  stock  FileBasedExampleGen + tfx's parquet_executor, LocalDagRunner, DirectRunner
  ours   ParquetExampleGen, LocalDagRunner, DirectRunner
  bound  pyarrow read + tfx_bsl encoder + gzip TFRecord write, one plain loop

Targets: ours >= 10x stock rows/s, and within 1.5x of the bound.
Prints a Markdown table for docs/BENCHMARKS.md and, with --json, a JSON line.

    .venv/bin/python benchmarks/ingest.py --rows 1000000
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402


def make_files(root: str, rows: int, files: int, seed: int = 0) -> None:
    """Mixed columns the stock path can also read (no nulls, UTF-8 strings)."""
    rng = np.random.default_rng(seed)
    per_file = rows // files
    os.makedirs(root, exist_ok=True)
    for k in range(files):
        n = per_file
        lengths = rng.integers(0, 6, n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        table = pa.table({
            "user_id": pa.array(rng.integers(0, 10**9, n), pa.int64()),
            "item_id": pa.array(rng.integers(0, 10**5, n).astype(np.int32)),
            "price": pa.array(rng.random(n).astype(np.float32)),
            "score": pa.array(rng.random(n)),
            "country": pa.array(np.array(["de", "fr", "us", "jp"])[rng.integers(0, 4, n)]),
            "hist": pa.ListArray.from_arrays(
                pa.array(offsets), pa.array(rng.integers(0, 10**5, int(lengths.sum()))
                                            .astype(np.int32))),
            "clicked": pa.array(rng.integers(0, 2, n), pa.int64()),
        })
        pq.write_table(table, os.path.join(root, f"part-{k}.parquet"))


def run_pipeline(name: str, component, root: str) -> float:
    from tfx import v1 as tfx
    p = tfx.dsl.Pipeline(
        pipeline_name=name, pipeline_root=os.path.join(root, "pipeline_root"),
        components=[component],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.sqlite")),
        enable_cache=False)
    start = time.perf_counter()
    tfx.orchestration.LocalDagRunner().run(p)
    return time.perf_counter() - start


def bench_stock(data: str, work: str) -> float:
    from tfx.components.example_gen.component import FileBasedExampleGen
    from tfx.components.example_gen.custom_executors import parquet_executor
    from tfx.dsl.components.base import executor_spec
    gen = FileBasedExampleGen(
        input_base=data,
        custom_executor_spec=executor_spec.BeamExecutorSpec(parquet_executor.Executor))
    return run_pipeline("bench-stock", gen, work)


def bench_ours(data: str, work: str) -> float:
    from tfx_bridge.components.parquet_example_gen import ParquetExampleGen
    return run_pipeline("bench-ours", ParquetExampleGen(input_base=data), work)


def bench_bound(data: str, work: str) -> float:
    import tensorflow as tf
    from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

    encoder = RecordBatchToExamplesEncoder()
    os.makedirs(work, exist_ok=True)
    start = time.perf_counter()
    with tf.io.TFRecordWriter(os.path.join(work, "bound.gz"), options="GZIP") as writer:
        for name in sorted(os.listdir(data)):
            for batch in pq.ParquetFile(os.path.join(data, name)).iter_batches(20_000):
                cols = []
                for col in batch.columns:
                    if pa.types.is_list(col.type):
                        t = pa.list_(pa.float32() if pa.types.is_floating(col.type.value_type)
                                     else pa.binary() if pa.types.is_string(col.type.value_type)
                                     else pa.int64())
                        cols.append(col.cast(t))
                        continue
                    t = (pa.float32() if pa.types.is_floating(col.type) else
                         pa.binary() if pa.types.is_string(col.type) else pa.int64())
                    offsets = pa.array(np.arange(len(col) + 1, dtype=np.int32))
                    cols.append(pa.ListArray.from_arrays(offsets, col.cast(t, safe=False)))
                for record in encoder.encode(pa.RecordBatch.from_arrays(cols, batch.schema.names)):
                    writer.write(record)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--skip-stock", action="store_true",
                        help="skip the slow stock run (ratios against it are then omitted)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="bench-ingest-")
    try:
        data = os.path.join(tmp, "data")
        make_files(data, args.rows, args.files)
        rows = sum(
            pq.ParquetFile(os.path.join(data, f)).metadata.num_rows for f in os.listdir(data))
        seconds = {"bound": bench_bound(data, os.path.join(tmp, "bound")),
                   "ours": bench_ours(data, os.path.join(tmp, "ours"))}
        if not args.skip_stock:
            seconds["stock"] = bench_stock(data, os.path.join(tmp, "stock"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rate = {k: rows / v for k, v in seconds.items()}
    result = {
        "rows": rows, "files": args.files, "cpus": os.cpu_count(),
        "machine": platform.machine(), "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "rows_per_second": {k: round(v) for k, v in rate.items()},
        "ours_vs_stock": round(rate["ours"] / rate["stock"], 1) if "stock" in rate else None,
        "bound_vs_ours": round(seconds["ours"] / seconds["bound"], 2),
    }
    print("| path | seconds | rows/s |\n|---|---|---|")
    for k in ("stock", "ours", "bound"):
        if k in seconds:
            print(f"| {k} | {seconds[k]:.1f} | {rate[k]:,.0f} |")
    if result["ours_vs_stock"] is not None:
        print(f"\nours / stock rows/s: {result['ours_vs_stock']}x (target >= 20x)")
    print(f"ours time / bound time: {result['bound_vs_ours']}x (target <= 1.5x)")
    if args.json:
        print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
