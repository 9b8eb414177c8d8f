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

from tfx_bridge import cli  # noqa: E402
from tfx_bridge.artifacts.examples import read_records  # noqa: E402
from tfx_bridge.components.serving_pusher import serving  # noqa: E402
from tfx_bridge.components.trt_optimizer import optimize  # noqa: E402
from tfx_bridge.pipelines import (  # noqa: E402
    demo_data,
    demo_models,
    demo_preprocessing,
    run_state,
    runner,
)
from tfx_bridge.torch import model as torch_model  # noqa: E402

ROWS = 1200
TRAIN_STEPS = 150
# The optimizer's timing rounds are not what this test is about.
RUN_FLAGS = ("--train-steps", str(TRAIN_STEPS), "--optimizer-iterations", "10")
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


def _demo(work: str, raw_feeds, capfd) -> dict:
    """`tfx-bridge demo` on one span, as a user runs it; a `tfx-bridge run` started
    on its workdir meanwhile is refused naming it. Checks what the demo printed and
    what it served, and returns its JSON summary."""
    import tensorflow_transform as tft

    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    proc = subprocess.Popen([exe, "demo", "--workdir", work, "--spans", "1", "--rows",
                             str(ROWS), "--train-steps", str(TRAIN_STEPS),
                             "--optimizer-iterations", "10", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        head = []  # the demo holds its locks, then writes the span: wait for it
        while not (head and head[-1].startswith("[1/3] Generated")):
            head.append(proc.stderr.readline())
            assert head[-1], "".join(head)
        code, _, err = _cli(capfd, *_run_args(work), "--json")
        assert code == cli.EXIT_BUSY, err
        assert f"pid {proc.pid}" in err and "demo --workdir" in err, err
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        proc.kill()
        proc.wait()
    proc.stdout, proc.stderr = stdout, "".join(head) + stderr
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["pushed_path"] == os.path.join(work, runner.SERVING_DIR, "ctr", "1")
    assert summary["schema_guard"]["blessed"] == 1
    assert summary["training"]["eval_auc"] > 0.5
    assert summary["conversion"]["max_abs_error"] <= 1e-4
    metadata = os.path.join(work, runner.METADATA_FILE)
    # The summary reads MLMD; it must hold the number the importer measured and reported.
    imported = _latest_model(work, "PyTorchModelImporter")
    with open(os.path.join(imported.uri, "report.json")) as f:
        assert summary["conversion"]["max_abs_error"] == json.load(f)["max_abs_error"]
    assert summary["optimizer"]["backend"] in optimize.CPU_BACKENDS
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
        assert line in proc.stdout
    assert "[3/3] Done" in proc.stderr
    # A line as each component ends, read from MLMD, on the terminal (not in the log).
    for name in ("ParquetExampleGen", "SchemaGuard", "PyTorchTrainer", "ServingPusher"):
        assert f"  {name}: done in " in proc.stderr, proc.stderr[-2000:]
    # Native library logs went to the workdir's log, not the terminal.
    assert os.path.exists(os.path.join(work, cli.PIPELINE_LOG))
    assert "library logs in" in proc.stderr
    assert not [ln for ln in proc.stderr.splitlines() if ln.startswith(("I0000", "W0000"))]
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


@pytest.mark.slow
def test_lifecycle_trains_warm_starts_gates_and_stops_bad_data_in_pipeline(tmp_path, capfd,
                                                                           raw_feeds):
    work = str(tmp_path / "work")
    data, base = os.path.join(work, "data"), os.path.join(work, runner.SERVING_DIR)
    root = os.path.join(base, "ctr")
    run = _run_args(work)

    first = _demo(work, raw_feeds, capfd)  # span 1, the demo's settings
    assert first["span"] == 1 and first["pushed_version"] == 1 and first["new_push"]
    assert first["training"]["retrained"] == 1 and first["training"]["warm_started_from"] is None
    assert serving.versions(root) == [1]  # the run refused meanwhile pushed nothing
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
    assert serving.versions(root) == [1] and serving.State.load(root).labels == {"stable": 1}
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
    assert serving.State.load(root).labels["stable"] == 2

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
    assert serving.versions(root) == [1, 2]
