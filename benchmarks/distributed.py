"""Distributed-run figures, each pair from one run on this machine.

1. ``tfx-bridge demo`` (training mode) under the DirectRunner and under Beam's
   portable runner with a local job service and two external SDK workers
   (``--beam-runner portable --beam-workers 2``), same inputs, fresh workdirs,
   wall time of each command and its pipeline step (from the progress lines).
2. Training throughput of the demo model (``CtrTransformed``, AdamW, batch 64)
   on Transform-shaped Examples (gzip, four files): one process, against two
   ranks under ``tfx_bridge.torch.distributed`` (gloo, DistributedDataParallel,
   each rank its content shard), at each ``--batch`` (per process). Records
   trained per second over the whole ``fit`` (the first epoch decodes the files;
   later ones reuse them), best of ``--rounds``.

    .venv/bin/python benchmarks/distributed.py --records 60000 --epochs 3
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

DEMO = ["--spans", "1", "--rows", "3000", "--train-steps", "150", "--json"]


def demo_times(tmp: str) -> dict:
    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    out = {}
    for name, extra in (("direct", []), ("portable", ["--beam-runner", "portable",
                                                      "--beam-workers", "2"])):
        start = time.monotonic()
        proc = subprocess.run([exe, "demo", "--workdir", os.path.join(tmp, name), *DEMO,
                               *extra], capture_output=True, text=True, cwd=tmp)
        wall = time.monotonic() - start
        if proc.returncode:
            raise SystemExit(f"demo ({name}) exit {proc.returncode}: {proc.stderr[-2000:]}")
        step = re.search(r"^\[2/3\] Ran .*\(([\d.]+)s\)$", proc.stderr, re.MULTILINE)
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        out[name] = {"wall_s": round(wall, 1), "pipeline_s": float(step.group(1)),
                     "pushed": summary["pushed"]}
    return out


def write_examples(root: str, records: int) -> str:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    split = os.path.join(root, "Split-train")
    os.makedirs(split)
    for part in range(4):
        with tf.io.TFRecordWriter(os.path.join(split, f"part-{part}.gz"), "GZIP") as w:
            for _ in range(records // 4):
                ints = {"item_id": int(rng.integers(1000)), "hour": int(rng.integers(24)),
                        "country_id": int(rng.integers(12)), "item_seen": int(rng.integers(2)),
                        "is_returning": int(rng.integers(2))}
                floats = {"price_z": float(rng.normal()), "user_ctr": float(rng.random() / 2),
                          "clicked": float(rng.random() < 0.1)}
                feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                           for k, v in ints.items()}
                feature.update({k: tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                                for k, v in floats.items()})
                w.write(tf.train.Example(features=tf.train.Features(feature=feature))
                        .SerializeToString())
    return root


def train(examples: str, epochs: int, result: str, batch: int) -> None:
    """One rank (or the single process): fit the demo model, rank 0 writes the figures."""
    import torch

    from tfx_bridge.pipelines.demo_models import CtrTransformed
    from tfx_bridge.torch import distributed, training
    from tfx_bridge.torch.examples import ExamplesDataset, Feature

    torch.set_num_threads(1)  # one core per rank: the comparison is processes, not threads
    names = ["item_id", "hour", "country_id", "price_z", "user_ctr", "item_seen",
             "is_returning"]
    features = {n: Feature("float32" if n in ("price_z", "user_ctr") else "int64")
                for n in names}
    features["clicked"] = Feature("float32")
    training.seed_everything(0)
    data = ExamplesDataset(examples, "train", features, batch_size=batch, shuffle=True,
                           shard=distributed.world())
    model = CtrTransformed(countries=12, dim=2)
    bce = torch.nn.BCELoss()

    def loss(m, b):
        return bce(m(*(b[n] for n in names))[0].reshape(-1), b["clicked"])

    fitted = training.fit(model, data, loss, torch.optim.AdamW(model.parameters(), lr=3e-3),
                          epochs=epochs, log=None)
    if distributed.is_primary():
        with open(result, "w") as f:
            json.dump({"records": fitted["epoch_records"] * epochs,
                       "seconds": fitted["seconds"], "steps": fitted["steps"]}, f)


def training_throughput(tmp: str, records: int, epochs: int, rounds: int,
                        batch: int) -> dict:
    from tfx_bridge.torch import distributed

    examples = os.path.join(tmp, "examples")
    if not os.path.isdir(examples):
        write_examples(examples, records)
    result = os.path.join(tmp, "result.json")
    best = {}
    for _ in range(rounds):
        for ranks in (1, 2):
            if ranks == 1:
                train(examples, epochs, result, batch)
            else:
                distributed.run(train, (examples, epochs, result, batch), nprocs=2)
            with open(result) as f:
                got = json.load(f)
            rate = got["records"] / got["seconds"]
            if rate > best.get(ranks, {}).get("records_per_s", 0):
                best[ranks] = {"records_per_s": round(rate), **got}
    best["ratio"] = round(best[2]["records_per_s"] / best[1]["records_per_s"], 2)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 1024],
                        help="batch size per process (each is one comparison)")
    parser.add_argument("--skip-demo", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-bench-dist-") as tmp:
        out = {} if args.skip_demo else {"demo": demo_times(tmp)}
        out["training"] = {f"batch {b}": training_throughput(tmp, args.records, args.epochs,
                                                              args.rounds, b)
                           for b in args.batch}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
