"""Scheduled retraining inside the pipeline, proven locally: each span is trained on
by PyTorchTrainer (warm-started from the latest blessed model), imported with its
Transform graph, gated by the Evaluator and pushed; bad data stops before training.

span 1 -> `tfx-bridge demo` as a user runs it (a subprocess): trained,
imported, pushed v1, and the pushed version answers a raw record and raw
features with what PyTorch computes on Transform's features; a `tfx-bridge run`
started meanwhile on its workdir exits 4 naming it. Then the schedule takes over
the demo's workdir with `tfx-bridge run` (the CLI, in this process): the same
inputs again -> the data steps cached, the model not retrained, no new version; a
broken trainer module and an empty newest span are refused (exit 2) before any
pipeline work; span 2 -> a run killed while training, then the next run takes
over its lock, marks the killed executions and retrains with a warm start from
v1: v2 pushed because the Evaluator blessed it; span 3 with one label class ->
trained, refused by the Evaluator (exit 1, AUC undefined), v2 still served; span
4 with a planted int32 overflow -> stopped at SchemaGuard (exit 1), nothing
trained; span 4 removed -> a quiet run reports span 3 (this run's), no progress.

Span 1's demo is also the DirectRunner side of the portable runner's comparison
(the same demo under Beam's portable runner with two workers): one demo run
serves both, which keeps the suite's time.

Size: one module, because a fixture shares span 1's demo run only within a
module (and `--dist loadfile` keeps a module on one worker).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402
from ml_metadata.proto import metadata_store_pb2  # noqa: E402
from tfx import v1 as tfx  # noqa: E402
from tfx.orchestration import metadata as tfx_metadata  # noqa: E402

from tfx_bridge import cli, portable  # noqa: E402
from tfx_bridge.artifacts.examples import read_records  # noqa: E402
from tfx_bridge.components.serving_pusher import state  # noqa: E402
from tfx_bridge.components.trt_optimizer import candidates  # noqa: E402
from tfx_bridge.pipelines import (  # noqa: E402
    demo_data,
    demo_models,
    demo_preprocessing,
    run_state,
    runner,
)
from tfx_bridge.storage import fs  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402

ROWS = 1200
TRAIN_STEPS = 150
# The optimizer's timing rounds are not what this test is about.
RUN_FLAGS = ("--train-steps", str(TRAIN_STEPS), "--optimizer-iterations", "10")
DEMO_FLAGS = ("--spans", "1", "--rows", str(ROWS), *RUN_FLAGS)
# The steps that run Beam, each starting its own workers under the portable runner.
BEAM_STEPS = ("ParquetExampleGen", "StatisticsGen", "SchemaGuard", "Transform", "Evaluator")
DATA_STEPS = ("ParquetExampleGen", "StatisticsGen", "ImportSchemaGen", "SchemaGuard",
              "Transform")


def _write(data: str, span: int, table) -> None:
    folder = os.path.join(data, f"span-{span}")
    os.makedirs(folder)
    pq.write_table(table, os.path.join(folder, "part-0.parquet"))


def _one_label_class(data: str, span: int) -> None:
    table = demo_data.make_span_table(span, ROWS)
    _write(data, span, table.set_column(table.schema.get_field_index("clicked"), "clicked",
                                        pa.array(np.zeros(ROWS, np.int64), pa.int64())))


def _planted_overflow(data: str, span: int) -> None:
    table = demo_data.make_span_table(span, ROWS)
    item = np.asarray(table.column("item_id")).astype(np.int64)
    item[[3, 200]] = 3_000_000_000  # int64 at the source, consumed as int32
    _write(data, span, table.set_column(table.schema.get_field_index("item_id"), "item_id",
                                        pa.array(item, pa.int64())))


def _cli(capfd, *args):
    """(exit code, stdout, stderr) of ``tfx-bridge ARGS`` in this process."""
    code = cli.main(list(args))
    out, err = capfd.readouterr()
    return code, out, err


def _run_args(work: str) -> list:
    return ["run", "--data-root", os.path.join(work, "data"), "--serving-base-path",
            os.path.join(work, runner.SERVING_DIR), "--workdir", work, *RUN_FLAGS]


def _until(condition, proc, what: str, timeout_s: float = 600):
    deadline = time.monotonic() + timeout_s
    while True:
        found = condition()
        if found:
            return found
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def first_span(tmp_path_factory) -> dict:
    """Span 1: `tfx-bridge demo` as a user runs it (a subprocess), and a `tfx-bridge
    run` started on its workdir meanwhile, refused naming it. Shared by the
    lifecycle (which goes on from this workdir) and the portable runner's
    comparison (whose DirectRunner side this is): what the comparison reads is
    taken here, before the lifecycle adds spans."""
    work = str(tmp_path_factory.mktemp("lifecycle") / "work")
    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    proc = subprocess.Popen([exe, "demo", "--workdir", work, *DEMO_FLAGS, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        head = []  # the demo holds its locks, then writes the span: wait for it
        while not (head and head[-1].startswith("[1/3] Generated")):
            head.append(proc.stderr.readline())
            assert head[-1], "".join(head)
        refused = subprocess.run([exe, *_run_args(work), "--json"], capture_output=True,
                                 text=True, timeout=300)
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, ("".join(head) + stderr)[-3000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    return {"work": work, "pid": proc.pid, "stdout": stdout, "stderr": "".join(head) + stderr,
            "summary": summary, "refused": refused, "outputs": _outputs(work, summary)}


def _check_first_span(first: dict, raw_feeds) -> dict:
    """What the demo printed and what it served; its JSON summary."""
    import tensorflow_transform as tft

    work, summary, refused = first["work"], first["summary"], first["refused"]
    assert refused.returncode == cli.EXIT_BUSY, refused.stderr
    assert f"pid {first['pid']}" in refused.stderr and "demo --workdir" in refused.stderr, \
        refused.stderr
    assert summary["pushed_path"] == os.path.join(work, runner.SERVING_DIR, "ctr", "1")
    assert summary["schema_guard"]["blessed"] == 1
    assert summary["training"]["eval_auc"] > 0.5
    assert summary["conversion"]["max_abs_error"] <= 1e-4
    metadata = os.path.join(work, runner.METADATA_FILE)
    # The summary reads MLMD; it must hold the number the importer measured and reported.
    imported = _latest_model(work, "PyTorchModelImporter")
    with open(os.path.join(imported.uri, "report.json")) as f:
        assert summary["conversion"]["max_abs_error"] == json.load(f)["max_abs_error"]
    assert summary["optimizer"]["backend"] in candidates.CPU_BACKENDS
    # The pushed model answers a raw record (a string country) with what PyTorch
    # computes on Transform's features of that record.
    assert isinstance(summary["prediction_input"]["country"], str)
    record = _raw_eval_record(work)
    graph = runner.latest_artifacts(metadata, "TransformGraph")[0]
    output = tft.TFTransformOutput(graph.uri)
    features = output.transform_features_layer()(
        tf.io.parse_example([record], output.raw_feature_spec()))
    folder = torch_model.folder_of(_latest_model(work, "PyTorchTrainer").uri)
    model = demo_models.CtrTransformed(**torch_model.read_spec(folder).module_kwargs)
    model.load_state_dict(torch_model.load_state_dict(folder))
    with torch.no_grad():
        score, experts = model.eval()(*(torch.from_numpy(features[n].numpy())
                                        for n in demo_preprocessing.MODEL_FEATURES))
    assert summary["prediction"]["score"] == pytest.approx(score[0].tolist(), abs=1e-4)
    assert summary["prediction"]["experts"] == experts[0].tolist()
    # ... and its raw features by name (serving_default), strings as strings.
    signature = tf.saved_model.load(summary["pushed_path"]).signatures["serving_default"]
    feeds = raw_feeds(signature, record)
    assert feeds["country"].dtype == tf.string
    raw_out = signature(**feeds)
    assert raw_out["score"].numpy()[0].tolist() == pytest.approx(score[0].tolist(), abs=1e-4)
    assert raw_out["experts"].numpy()[0].tolist() == experts[0].tolist()
    for line in ("SchemaGuard: clean", "PyTorchTrainer: trained", "Pushed: version 1",
                 "Prediction of the pushed model on one raw eval record (country="):
        assert line in first["stdout"]
    stderr = first["stderr"]
    assert "[3/3] Done" in stderr
    # A line as each component ends, read from MLMD, on the terminal (not in the log).
    for name in ("ParquetExampleGen", "SchemaGuard", "PyTorchTrainer", "ServingPusher"):
        assert f"  {name}: done in " in stderr, stderr[-2000:]
    # Native library logs went to the workdir's log, not the terminal.
    assert os.path.exists(os.path.join(work, cli.PIPELINE_LOG))
    assert "library logs in" in stderr
    assert not [ln for ln in stderr.splitlines() if ln.startswith(("I0000", "W0000"))]
    return summary


def _raw_eval_record(work: str) -> bytes:
    raw = [a for a in runner.latest_artifacts(os.path.join(work, runner.METADATA_FILE),
                                              "Examples") if "/ParquetExampleGen/" in a.uri]
    return read_records(raw[-1].uri, 1, split="eval")[0]


def _executions(workdir: str):
    """(component type short name, execution) in MLMD, oldest first."""
    config = tfx.orchestration.metadata.sqlite_metadata_connection_config(
        os.path.join(workdir, runner.METADATA_FILE))
    with tfx_metadata.Metadata(config) as m:
        types = {t.id: t.name.rsplit(".", 1)[-1] for t in m.store.get_execution_types()}
        return [(types[e.type_id], e) for e in sorted(m.store.get_executions(),
                                                      key=lambda e: e.id)]


def _latest_model(workdir: str, component: str):
    return [a for a in runner.latest_artifacts(os.path.join(workdir, runner.METADATA_FILE),
                                               "Model") if f"/{component}/" in a.uri][0]


def _running(work: str, component: str):
    """``component``'s execution while it is RUNNING, read without a write lock."""
    from ml_metadata import metadata_store

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = os.path.join(work, runner.METADATA_FILE)
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    try:
        store = metadata_store.MetadataStore(config)
        types = {t.id: t.name.rsplit(".", 1)[-1] for t in store.get_execution_types()}
        return next((e for e in store.get_executions()
                     if types[e.type_id] == component
                     and e.last_known_state == metadata_store_pb2.Execution.RUNNING), None)
    except Exception:  # noqa: BLE001  (the store is being written: poll again)
        return None


def _summary(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _records(examples: str) -> dict:
    """{split: the records as sorted tuples of (feature, values)}: a record's
    place in the files depends on the runner, its content does not."""
    out = {}
    for split in ("train", "eval"):
        rows = []
        for record in tf.data.TFRecordDataset(
                fs.glob(fs.join(examples, f"Split-{split}", "*")), "GZIP"):
            feature = tf.train.Example.FromString(record.numpy()).features.feature
            rows.append(tuple(sorted(
                (name, tuple(getattr(f, f.WhichOneof("kind")).value) if f.WhichOneof("kind")
                 else ()) for name, f in feature.items())))
        out[split] = sorted(rows)
    return out


def _assert_same_records(a: dict, b: dict) -> None:
    """Integers and strings equal, floats within float tolerance, record by record."""
    assert a.keys() == b.keys()
    for split in a:
        assert len(a[split]) == len(b[split]), split
        for x, y in zip(a[split], b[split], strict=True):
            assert [name for name, _ in x] == [name for name, _ in y]
            for (name, u), (_, v) in zip(x, y, strict=True):
                if u and isinstance(u[0], float):
                    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6, err_msg=name)
                else:
                    assert u == v, (split, name, u, v)


def _only(pattern: str) -> str:
    found = fs.glob(pattern)
    assert len(found) == 1, (pattern, found)
    return found[0]


def _outputs(work: str, summary: dict) -> dict:
    """A one-span run's outputs as the runner comparison reads them: files per
    split, records, Transform's vocabulary, and the pushed version's answer to the
    first raw eval record of this run's examples."""
    root = fs.join(work, "pipeline_root")
    examples = _only(fs.join(root, "ParquetExampleGen", "examples", "*"))
    transformed = _only(fs.join(root, "Transform", "transformed_examples", "*"))
    graph = _only(fs.join(root, "Transform", "transform_graph", "*"))
    files = {}
    for name, uri in (("examples", examples), ("transformed", transformed)):
        files[name] = {split: len(fs.glob(fs.join(uri, f"Split-{split}", "*")))
                       for split in ("train", "eval")}
    return {"uri": examples, "files": files, "records": _records(examples),
            "transformed": _records(transformed),
            "vocabulary": fs.read_bytes(fs.join(graph, "transform_fn", "assets",
                                                demo_preprocessing.COUNTRY_VOCABULARY)),
            "pushed_path": summary["pushed_path"]}


@pytest.mark.slow
def test_demo_under_portable_runner_two_workers_same_results_as_direct_runner(
        first_span, tmp_path, capsys, monkeypatch):
    """The demo (Transform + PyTorchTrainer) under Beam's portable runner with two
    external SDK workers on 127.0.0.1, beside the DirectRunner's span-1 demo of the
    same inputs. What the runners promise is compared, not bits: the same records
    per split (the portable run's Beam steps wrote two shards, in another order),
    Transform's vocabulary, the transformed records (integers exactly, floats
    within float tolerance: Transform's analyzers combine partial results in the
    order the workers finish, so a mean or a variance may differ in its last bit,
    and training amplifies that), and the same prediction within 1e-4 from both
    pushed versions on one raw record. The Beam work ran in the pool's worker
    processes: two started for each Beam step, in the logs' folder with their own
    TMPDIR, not the launcher's."""
    launcher = tmp_path / "launcher"
    launcher.mkdir()
    monkeypatch.chdir(launcher)
    work = str(tmp_path / "portable")
    code = cli.main(["demo", "--workdir", work, *DEMO_FLAGS, "--json", "--quiet",
                     "--beam-runner", "portable", "--beam-workers", "2"])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_OK, err[-4000:]
    ported = json.loads(out.strip().splitlines()[-1])
    direct, a, b = first_span["summary"], first_span["outputs"], _outputs(work, ported)

    # The runners laid the records out differently: one file against two.
    assert a["files"] == {k: {"train": 1, "eval": 1} for k in a["files"]}
    assert b["files"] == {k: {"train": 2, "eval": 2} for k in b["files"]}
    assert sum(len(rows) for rows in a["records"].values()) == ROWS
    _assert_same_records(a["records"], b["records"])
    _assert_same_records(a["transformed"], b["transformed"])
    assert a["vocabulary"] == b["vocabulary"] and a["vocabulary"].strip()
    # One raw record (the DirectRunner's first eval record: each run's summary shows
    # its own first, which follows the file layout) through both pushed versions.
    assert direct["pushed_version"] == ported["pushed_version"] == 1
    raw_a, pred_a = runner.predict_one(a["pushed_path"], a["uri"])
    raw_b, pred_b = runner.predict_one(b["pushed_path"], a["uri"])
    assert raw_a == raw_b == direct["prediction_input"]
    # Trained on features equal within float tolerance; the optimizer may keep another
    # candidate in each run (it times them), each checked equivalent to its input.
    np.testing.assert_allclose(pred_a["score"], pred_b["score"], rtol=0, atol=1e-4)

    logs = tmp_path / "portable" / "beam_logs"
    started = [ln for ln in (logs / portable.WORKER_POOL_LOG).read_text().splitlines()
               if ln.startswith(portable.FORKED)]
    assert len(started) == 2 * len(BEAM_STEPS), "\n".join(started)
    assert not list(logs.glob("workers-tmp-*"))  # the workers' TMPDIR, removed after
    assert not list(launcher.iterdir())  # nothing written where the launcher runs
    assert not os.path.exists(os.path.join(first_span["work"], "beam_logs"))


@pytest.mark.slow
def test_lifecycle_trains_warm_starts_gates_and_stops_bad_data_in_pipeline(
        first_span, tmp_path, capfd, raw_feeds):
    work = first_span["work"]
    data, base = os.path.join(work, "data"), os.path.join(work, runner.SERVING_DIR)
    root = os.path.join(base, "ctr")
    run = _run_args(work)

    first = _check_first_span(first_span, raw_feeds)  # span 1, the demo's settings
    assert first["span"] == 1 and first["pushed_version"] == 1 and first["new_push"]
    assert first["training"]["retrained"] == 1 and first["training"]["warm_started_from"] is None
    assert state.versions(root) == [1]  # the run refused meanwhile pushed nothing
    first_weights = torch_model.load_state_dict(
        torch_model.folder_of(_latest_model(work, "PyTorchTrainer").uri))

    seen = {e.id for _, e in _executions(work)}
    code, out, err = _cli(capfd, *run, "--json")
    again = _summary(out)
    assert code == cli.EXIT_OK and not again["new_push"] and again["served_versions"] == [1]
    assert again["push_reason"].startswith("identical to version 1")
    rerun = {name: e for name, e in _executions(work) if e.id not in seen}
    for name in DATA_STEPS:
        assert rerun[name].last_known_state == metadata_store_pb2.Execution.CACHED, name
    # The base model changed (none -> v1), so TFX runs the trainer again; v1 was trained
    # on these very examples, so it is re-emitted rather than trained on them twice.
    assert again["training"]["retrained"] == 0

    # On this unchanged span (the trainer would re-emit), a broken trainer module is
    # still found now, before any pipeline work.
    typo = tmp_path / "ctr_trainer.py"
    typo.write_text("def run_fn(fn_args)\n    pass\n")
    start = time.monotonic()
    code, _, err = _cli(capfd, *run, "--trainer-module", str(typo))
    assert code == cli.EXIT_BAD_INPUT and f"--trainer-module {typo} does not import: " \
        f"SyntaxError" in err and f"(at {typo}:1)" in err, err
    assert time.monotonic() - start < 20 and "internal error" not in err
    # A newest span without Parquet files is refused by name; v1 stays served.
    os.makedirs(os.path.join(data, "span-2"))
    code, _, err = _cli(capfd, *run)
    assert code == cli.EXIT_BAD_INPUT and "The newest span folder " \
        f"{os.path.join(data, 'span-2')} holds no file matching '*.parquet'" in err, err
    assert state.versions(root) == [1] and state.State.load(root).labels == {"stable": 1}
    os.rmdir(os.path.join(data, "span-2"))

    # Span 2: a run killed while it trains (the cron host rebooted) ...
    demo_data.write_demo_spans(data, spans=[2], rows_per_span=ROWS, files_per_span=1)
    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    killed = subprocess.Popen([exe, *run, "--quiet"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        trainer = _until(lambda: _running(work, "PyTorchTrainer"), killed, "training")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
    # ... then the next run takes over its lock, marks what it left RUNNING, and
    # trains: warm-started from the latest blessed model.
    code, out, err = _cli(capfd, *run, "--json")
    second = _summary(out)
    assert code == cli.EXIT_OK, err
    assert f"from a run that died holding it (pid {killed.pid}" in err, err
    assert f"PyTorchTrainer (execution {trainer.id}): left RUNNING by a killed run, " \
        "marked FAILED" in err, err
    marked = {e.id: e for _, e in _executions(work)}[trainer.id]
    assert marked.last_known_state == metadata_store_pb2.Execution.FAILED
    assert "its run was killed" in marked.custom_properties[
        run_state.ABANDONED_PROPERTY].string_value
    assert second["span"] == 2 and second["pushed_version"] == 2 and second["new_push"]
    trained = _latest_model(work, "PyTorchTrainer")
    assert trained.custom_properties["retrained"].int_value == 1
    # Warm-started from the latest blessed model: the optimizer's output of the rerun,
    # carrying v1's PyTorch weights.
    base_weights = trained.custom_properties["warm_started_from"].string_value
    assert "/TrtOptimizer/" in base_weights
    v1 = torch_model.load_state_dict(base_weights)
    assert all(torch.equal(v1[k], first_weights[k]) for k in v1)
    assert second["push_reason"] == "pushed as version 2 (stable)"

    # Span 3, every label 0: trained, and refused by the Evaluator with its reason.
    _one_label_class(data, 3)
    code, out, err = _cli(capfd, *run, "--json")
    third = _summary(out)
    assert code == cli.EXIT_CHECK_FAILED, err
    assert third["span"] == 3 and third["training"]["retrained"] == 1
    assert third["training"]["eval_auc"] is None  # undefined, not 0.5 or NaN
    assert not third["pushed"] and "(Evaluator: " in third["push_reason"]
    assert "(Evaluator: AUC undefined: every eval label is 0)" in third["push_reason"], \
        third["push_reason"]
    assert "AUC undefined: every eval label is 0" in out
    assert state.State.load(root).labels["stable"] == 2

    trainer_runs = sum(1 for name, _ in _executions(work) if name == "PyTorchTrainer")
    _planted_overflow(data, 4)
    code, _, err = _cli(capfd, *run)
    assert code == cli.EXIT_CHECK_FAILED
    assert "feature 'item_id' (data_vs_consumer.range)" in err, err
    assert sum(1 for name, _ in _executions(work) if name == "PyTorchTrainer") == trainer_runs

    # Span 4 removed: the run reuses span 3's cached work, and says span 3; quietly.
    shutil.rmtree(os.path.join(data, "span-4"))
    code, out, err = _cli(capfd, *run, "--json", "--quiet")
    assert code == cli.EXIT_CHECK_FAILED and _summary(out)["span"] == 3
    assert "started" not in err and "done in" not in err and "Loading" not in err, err
    assert state.versions(root) == [1, 2]
