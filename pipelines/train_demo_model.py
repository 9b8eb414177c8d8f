"""Plays the research team: trains the demo CTR model for a few seconds in PyTorch.

Reads one span folder of the demo Parquet data, trains
``demo_models.CtrMoE`` (a top-k mixture of experts) on item_id, hour, price
and user_ctr to predict ``clicked``, and saves a state_dict into a research
output folder, the way a research team hands a model over. The pipeline
imports that folder.

    python -m tfx_bridge.pipelines.train_demo_model --span-dir demo_output/data/span-2 \\
        --output demo_output/research/span-2
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Dict

import numpy as np
import pyarrow.parquet as pq

from tfx_bridge.storage import fs

WEIGHTS_FILE = "weights.pt"
CARD_FILE = "model_card.json"


def load_features(span_dir: str) -> Dict[str, np.ndarray]:
    with fs.local_copy(span_dir, prefix="tfx-bridge-span-") as local:
        table = pq.read_table(local,
                              columns=["item_id", "hour", "price", "user_ctr", "clicked"])
    return {name: table.column(name).to_numpy() for name in table.column_names}


def train(span_dir: str, output_dir: str, steps: int = 300, seed: int = 0) -> dict:
    """Trains for ``steps`` Adam steps (a few seconds); returns the model card.

    A fixed step count and seed make the weights the same on every run, so a
    rerun over unchanged data is cached end to end and pushes no new version.
    """
    import torch

    from tfx_bridge.pipelines.demo_models import CTR_INPUTS, CTR_OUTPUTS, CtrMoE

    torch.manual_seed(seed)
    data = load_features(span_dir)
    inputs = (torch.from_numpy(data["item_id"].astype(np.int32)),
              torch.from_numpy(data["hour"].astype(np.int32)),
              torch.from_numpy(data["price"].astype(np.float32)),
              torch.from_numpy(data["user_ctr"].astype(np.float32)))
    label = torch.from_numpy(data["clicked"].astype(np.float32)).unsqueeze(-1)
    model = CtrMoE()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = torch.nn.BCELoss()
    rng = np.random.default_rng(seed)
    start, loss = time.monotonic(), float("nan")
    for _ in range(steps):
        idx = torch.from_numpy(rng.integers(0, len(label), 256))
        score, _ = model(*(t[idx] for t in inputs))
        loss_t = loss_fn(score, label[idx])
        optimizer.zero_grad()
        loss_t.backward()
        optimizer.step()
        loss = float(loss_t)
    model.eval()
    card = {"module_class": "tfx_bridge.pipelines.demo_models:CtrMoE", "inputs": CTR_INPUTS,
            "outputs": CTR_OUTPUTS, "weights": WEIGHTS_FILE, "trained_on": span_dir,
            "steps": steps, "final_loss": round(loss, 4),
            "seconds": round(time.monotonic() - start, 2)}
    with fs.local_output(output_dir, prefix="tfx-bridge-research-") as local:
        torch.save(model.state_dict(), os.path.join(local, WEIGHTS_FILE))
        with open(os.path.join(local, CARD_FILE), "w") as f:
            json.dump(card, f, indent=2)
    return card


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--span-dir", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps(train(args.span_dir, args.output, args.steps)))


if __name__ == "__main__":
    main()
