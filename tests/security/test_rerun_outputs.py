"""Finding 11: a run into an existing --output leaves exactly what a run into an
empty one leaves; a failed run leaves the earlier results as they were; an
output holding someone else's files is refused, not cleared."""
from __future__ import annotations

import hashlib
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from tfx_bridge import cli
from tfx_bridge.artifacts import tfrecord
from tfx_bridge.storage import staging


def _main(capfd, *args):
    code = cli.main([*args, "--quiet"])
    out, err = capfd.readouterr()
    return code, out, err


def _tree(folder) -> dict:
    """{relative path: sha256} of every file under ``folder`` (names only for dirs);
    records files by their tf.Examples, canonical and sorted (the gzip header holds
    a time stamp; tfx_bsl's encoder orders feature-map entries per run)."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), folder) + "/"] = None
        for f in files:
            path = os.path.join(root, f)
            if f.endswith(".gz"):
                data = b"".join(sorted(
                    tf.train.Example.FromString(r).SerializeToString(deterministic=True)
                    for b in tfrecord.read_batches(path) for r in b.records))
            else:
                with open(path, "rb") as fh:
                    data = fh.read()
            out[os.path.relpath(path, folder)] = hashlib.sha256(data).hexdigest()
    return out


def _parquet(folder, n=30, bad=False):
    os.makedirs(folder, exist_ok=True)
    values = pa.array(list(range(n)), pa.int64()) if not bad else \
        pa.array([2**64 - 1] * n, pa.uint64())
    pq.write_table(pa.table({"id": values, "x": [float(i) for i in range(n)]}),
                   os.path.join(folder, "d.parquet"))
    return str(folder)


def test_ingest_rerun_fewer_splits_same_as_fresh_run(tmp_path, capfd):
    base = _parquet(tmp_path / "in")
    out, fresh = str(tmp_path / "out"), str(tmp_path / "fresh")
    assert _main(capfd, "ingest", "--input-base", base, "--output", out, "--splits",
                 "train:1,eval:1,test:1")[0] == 0
    assert os.path.isdir(os.path.join(out, "Split-test"))
    assert _main(capfd, "ingest", "--input-base", base, "--output", out)[0] == 0
    assert _main(capfd, "ingest", "--input-base", base, "--output", fresh)[0] == 0
    assert _tree(out) == _tree(fresh)
    assert sorted(os.listdir(out)) == ["Split-eval", "Split-train", "source_schema.json"]


def test_ingest_failed_rerun_leaves_earlier_output_intact(tmp_path, capfd):
    out = str(tmp_path / "out")
    assert _main(capfd, "ingest", "--input-base", _parquet(tmp_path / "in"), "--output",
                 out)[0] == 0
    before = _tree(out)
    code, _, err = _main(capfd, "ingest", "--input-base", _parquet(tmp_path / "bad", bad=True),
                         "--output", out)
    assert code == cli.EXIT_BAD_INPUT and "exceeds int64 max" in err, err
    assert _tree(out) == before  # old source_schema.json and splits, no staging left


def test_ingest_output_with_foreign_files_refused_untouched(tmp_path, capfd):
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("mine")
    code, _, err = _main(capfd, "ingest", "--input-base", _parquet(tmp_path / "in"),
                         "--output", str(out))
    assert code == cli.EXIT_BAD_INPUT
    assert "holds ['thesis.tex'], which `ingest` does not write" in err, err
    assert sorted(os.listdir(out)) == ["thesis.tex"]


def test_staged_output_killed_run_leftovers_removed_by_next_run(tmp_path):
    out = tmp_path / "out"
    (out / (staging.STAGING_PREFIX + "dead")).mkdir(parents=True)
    (out / "report.md").write_text("old")
    with staging.staged_output(str(out), ("report.md",), "demo") as stage:
        (tmp_path / "out" / os.path.basename(stage) / "report.md").write_text("new")
    assert sorted(os.listdir(out)) == ["report.md"]
    assert (out / "report.md").read_text() == "new"


def test_staged_output_error_keeps_earlier_entries(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("old")
    with pytest.raises(RuntimeError, match="boom"):
        with staging.staged_output(str(out), ("report.md",), "demo") as stage:
            (tmp_path / "out" / os.path.basename(stage) / "report.md").write_text("new")
            raise RuntimeError("boom")
    assert sorted(os.listdir(out)) == ["report.md"]
    assert (out / "report.md").read_text() == "old"


def test_import_failed_rerun_keeps_blessed_report_and_savedmodel(tmp_path, capfd):
    torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
    from tfx_bridge.pipelines import demo_models

    # An earlier, blessed import's output, built by hand: what the verb wrote
    # matters here, not how the model inside was made.
    out = tmp_path / "imported"

    class Earlier(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
        def serve(self, x):
            return {"logits": tf.reduce_sum(x, axis=1, keepdims=True)}

    earlier = Earlier()
    tf.saved_model.save(earlier, str(out / "Format-Serving"),
                        signatures={"serving_default": earlier.serve})
    (out / "report.json").write_text(json.dumps({"blessed": True}))
    (out / "report.md").write_text("equivalent")
    before = _tree(str(out))

    weights = str(tmp_path / "mlp.pt")
    torch.save(demo_models.build("mlp").state_dict(), weights)
    ingested = str(tmp_path / "examples")
    assert _main(capfd, "ingest", "--input-base", _parquet(tmp_path / "in"), "--output",
                 ingested)[0] == 0
    # Examples whose x does not fit the model fail after the SavedModel is written.
    code, _, err = _main(capfd, "import-model", "--state-dict", weights, "--module-class",
                         "tfx_bridge.pipelines.demo_models:MLP", "--input", "x:float32:-1,8",
                         "--output-name", "logits", "--output", str(out), "--examples",
                         ingested)
    assert code == cli.EXIT_BAD_INPUT, err
    assert "do not parse as the model's inputs (x:float32:-1,8): Name: <unknown>, Key: x" in err
    assert _tree(str(out)) == before
