"""tfx_bridge.torch.distributed: a training function on 2 CPU processes (gloo).
Each rank reads its shard (every record once per epoch across the ranks),
fit() averages gradients (DistributedDataParallel), only rank 0 saves; a rank
that raises fails the run naming that rank and its error, and no rank is left."""
from __future__ import annotations

import json
import multiprocessing
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge.torch import distributed  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402

pytestmark = pytest.mark.slow

# The ranks are fresh interpreters: what they run is a module they import by name.
_RANKS = textwrap.dedent('''
    import json, os
    import torch
    from tfx_bridge.torch import distributed, training
    from tfx_bridge.torch import model as torch_model
    from tfx_bridge.torch.examples import ExamplesDataset, Feature

    def train(examples, out, seen):
        rank, size = distributed.world()
        training.seed_everything(3)
        data = ExamplesDataset(examples, "train", {"id": Feature("int64"),
                               "y": Feature("float32")}, batch_size=8, chunk_records=8,
                               shard=(rank, size))
        ids = [int(i) for b in data for i in b["id"].tolist()]
        with open(os.path.join(seen, f"rank-{rank}.json"), "w") as f:
            json.dump(ids, f)
        with open(os.path.join(seen, f"port-{rank}.txt"), "w") as f:
            f.write(os.environ["MASTER_PORT"])
        model = torch.nn.Linear(1, 1)
        loss = lambda m, b: torch.nn.functional.mse_loss(
            m(b["y"].reshape(-1, 1)), b["y"].reshape(-1, 1))
        fitted = training.fit(model, data, loss, torch.optim.SGD(model.parameters(), lr=0.1),
                              epochs=2, log=None)
        torch_model.save(out, model, torch_model.ModelSpec("torch.nn:Linear",
                         {"in_features": 1, "out_features": 1}, ["y:float32:-1,1"],
                         ["out"]), {"rank_saved": float(rank),
                                    "epoch_records": float(fitted["epoch_records"])})

    def fail_on_rank_1():
        if distributed.world()[0] == 1:
            raise ValueError("no GPU quota on this node")
''')


@pytest.fixture
def ranks_module(tmp_path, monkeypatch):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "rank_fns.py").write_text(_RANKS)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))  # handed to the spawned ranks
    import importlib

    yield importlib.import_module("rank_fns")
    sys.modules.pop("rank_fns", None)


def _examples(folder, n: int) -> str:
    import tensorflow as tf

    split = folder / "Split-train"
    split.mkdir(parents=True)
    for part in range(3):  # three files, one per ~third of the records
        with tf.io.TFRecordWriter(str(split / f"data-{part}.gz"), "GZIP") as w:
            for i in range(part, n, 3):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    "y": tf.train.Feature(float_list=tf.train.FloatList(value=[i / n]))}))
                    .SerializeToString())
    return str(folder)


def test_distributed_two_ranks_read_each_record_once_and_rank_0_saves(tmp_path, ranks_module,
                                                                     monkeypatch):
    examples = _examples(tmp_path / "ex", 60)
    seen, out = tmp_path / "seen", tmp_path / "model"
    seen.mkdir()
    served = []  # the rendezvous store the launcher serves, on the port it bound

    def store(*args, **kwargs):
        served.append(real_store(*args, **kwargs))
        return served[-1]

    real_store = torch.distributed.TCPStore
    monkeypatch.setattr(torch.distributed, "TCPStore", store)
    distributed.run(ranks_module.train, (examples, str(out), str(seen)), nprocs=2)
    # Both ranks met at that store: the launcher bound port 0, no port was probed.
    assert len(served) == 1 and served[0].port > 0
    assert {(seen / f"port-{r}.txt").read_text() for r in (0, 1)} == {str(served[0].port)}
    ids = [json.loads((seen / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert ids[0] and ids[1] and not set(ids[0]) & set(ids[1])
    assert sorted(ids[0] + ids[1]) == list(range(60))  # each record once, per epoch
    # Rank 0 only saves; fit counts the first epoch's records over both ranks.
    assert torch_model.read_metrics(str(out)) == {"rank_saved": 0.0, "epoch_records": 60.0}
    assert torch_model.load_state_dict(str(out))["weight"].shape == (1, 1)
    assert distributed.world() == (0, 1)  # the launcher is not a rank


def test_distributed_rank_raising_fails_the_run_by_name_and_leaves_no_rank(ranks_module):
    with pytest.raises(distributed.DistributedRunError,
                       match=r"rank 1 of 2 failed: ValueError: no GPU quota on this node "
                             r"\(at .*rank_fns\.py:\d+ in fail_on_rank_1\)"):
        distributed.run(ranks_module.fail_on_rank_1, (), nprocs=2)
    assert multiprocessing.active_children() == []
