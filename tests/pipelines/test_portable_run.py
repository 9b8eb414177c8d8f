"""The demo pipeline (training mode: Transform + PyTorchTrainer) under Beam's
portable runner with two external SDK workers on 127.0.0.1, beside a
DirectRunner run of the same inputs.

The same split counts, Transform vocabulary, trained weights (same seed, one
training process each) and the pushed version's prediction on one raw record,
although the portable run's Beam steps wrote their outputs in other files
(two shards, records in another order). The Beam work ran in the pool's worker
processes: two started for each of the five Beam steps (ParquetExampleGen,
StatisticsGen, SchemaGuard, Transform, Evaluator), in the logs' folder with
their own TMPDIR, not the launcher's.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402

from tfx_bridge import cli, portable  # noqa: E402
from tfx_bridge.pipelines import runner  # noqa: E402
from tfx_bridge.storage import fs  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402

pytestmark = pytest.mark.slow

DEMO = ["--spans", "1", "--rows", "300", "--train-steps", "30",
        "--optimizer-iterations", "10", "--json", "--quiet"]
BEAM_STEPS = 5  # ParquetExampleGen, StatisticsGen, SchemaGuard, Transform, Evaluator


def _demo(workdir, capsys, *extra) -> dict:
    code = cli.main(["demo", "--workdir", str(workdir), *DEMO, *extra])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_OK, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def _one(pattern: str) -> str:
    found = fs.glob(pattern)
    assert len(found) == 1, (pattern, found)
    return found[0]


def _splits(examples: str) -> dict:
    """{split: (record count, file count)}."""
    out = {}
    for split in ("train", "eval"):
        files = fs.glob(fs.join(examples, f"Split-{split}", "*"))
        out[split] = (sum(1 for _ in tf.data.TFRecordDataset(files, "GZIP")), len(files))
    return out


def _outputs(workdir) -> dict:
    root = fs.join(str(workdir), "pipeline_root")
    graph = _one(fs.join(root, "Transform", "transform_graph", "*"))
    examples = _one(fs.join(root, "ParquetExampleGen", "examples", "*"))
    return {
        "uri": examples, "examples": _splits(examples),
        "transformed": _splits(_one(fs.join(root, "Transform", "transformed_examples", "*"))),
        "vocabulary": fs.read_bytes(fs.join(graph, "transform_fn", "assets", "country")),
        "weights": torch_model.load_state_dict(torch_model.folder_of(
            _one(fs.join(root, "PyTorchTrainer", "model", "*")))),
    }


def test_demo_under_portable_runner_two_workers_same_results_as_direct_runner(
        tmp_path, capsys, monkeypatch):
    launcher = tmp_path / "launcher"
    launcher.mkdir()
    monkeypatch.chdir(launcher)
    ported = _demo(tmp_path / "portable", capsys, "--beam-runner", "portable",
                   "--beam-workers", "2")
    direct = _demo(tmp_path / "direct", capsys)
    a, b = _outputs(tmp_path / "direct"), _outputs(tmp_path / "portable")

    for key in ("examples", "transformed"):
        assert {s: n for s, (n, _) in a[key].items()} == \
            {s: n for s, (n, _) in b[key].items()}
        # The runners laid the records out differently: one file against two.
        assert {f for _, f in a[key].values()} == {1} and {f for _, f in b[key].values()} == {2}
    assert sum(n for n, _ in a["examples"].values()) == 300
    assert a["vocabulary"] == b["vocabulary"] and a["vocabulary"].strip()
    assert a["weights"].keys() == b["weights"].keys()
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
    # One raw record (the DirectRunner's first eval record: each run's summary shows
    # its own first, which follows the file layout) through both pushed versions.
    assert direct["pushed_version"] == ported["pushed_version"] == 1
    raw_a, pred_a = runner.predict_one(direct["pushed_path"], a["uri"])
    raw_b, pred_b = runner.predict_one(ported["pushed_path"], a["uri"])
    assert raw_a == raw_b == direct["prediction_input"] and pred_a["experts"] == pred_b["experts"]
    # The optimizer may keep another candidate (it times them); each is checked equal.
    np.testing.assert_allclose(pred_a["score"], pred_b["score"], rtol=1e-5)

    logs = tmp_path / "portable" / "beam_logs"
    started = [ln for ln in (logs / portable.WORKER_POOL_LOG).read_text().splitlines()
               if ln.startswith("Starting worker with command")]
    assert len(started) == 2 * BEAM_STEPS, "\n".join(started)
    assert not list(logs.glob("workers-tmp-*"))  # the workers' TMPDIR, removed after
    assert not list(launcher.iterdir())  # nothing written where the launcher runs
    assert not (tmp_path / "direct" / "beam_logs").exists()
