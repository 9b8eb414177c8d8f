"""Scheduled retraining inside the pipeline, proven locally: each span is trained on
by PyTorchTrainer (warm-started from the latest blessed model), imported with its
Transform graph, gated by the Evaluator and pushed; bad data stops before training.

span 1 -> `tfx-bridge demo` as a user runs it (a subprocess): trained,
imported, pushed v1, and the pushed version answers a raw record and raw
features with what PyTorch computes on Transform's features; then the
schedule takes over the demo's workdir: the same inputs again -> the data steps
cached, the model not retrained, no new version; span 2 -> retrained with a warm
start from v1, v2 pushed because the Evaluator blessed it; span 3 with shuffled
labels -> trained, refused by the Evaluator, v2 still served; span 4 with a
planted int32 overflow -> stopped at SchemaGuard, nothing trained.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

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
from tfx_bridge.components.schema_guard.errors import AnomaliesFound  # noqa: E402
from tfx_bridge.components.serving_pusher import serving  # noqa: E402
from tfx_bridge.components.trt_optimizer import optimize  # noqa: E402
from tfx_bridge.pipelines import demo_data, demo_models, demo_preprocessing, runner  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402

ROWS = 1200
# The optimizer's timing rounds are not what this test is about. AUC must reach 0.6:
# labels shuffled within a span leave any model near 0.5.
OPTIONS = {"optimizer_iterations": 10, "train_steps": 150, "auc_floor": 0.6}
DATA_STEPS = ("ParquetExampleGen", "StatisticsGen", "ImportSchemaGen", "SchemaGuard",
              "Transform")


def _write(data: str, span: int, table) -> None:
    folder = os.path.join(data, f"span-{span}")
    os.makedirs(folder)
    pq.write_table(table, os.path.join(folder, "part-0.parquet"))


def _shuffled_labels(data: str, span: int) -> None:
    table = demo_data.make_span_table(span, ROWS)
    labels = np.random.default_rng(7).permutation(np.asarray(table.column("clicked")))
    _write(data, span, table.set_column(table.schema.get_field_index("clicked"), "clicked",
                                        pa.array(labels, pa.int64())))


def _planted_overflow(data: str, span: int) -> None:
    table = demo_data.make_span_table(span, ROWS)
    item = np.asarray(table.column("item_id")).astype(np.int64)
    item[[3, 200]] = 3_000_000_000  # int64 at the source, consumed as int32
    _write(data, span, table.set_column(table.schema.get_field_index("item_id"), "item_id",
                                        pa.array(item, pa.int64())))


def _demo(work: str, raw_feeds) -> dict:
    """`tfx-bridge demo` on one span, as a user runs it; checks what it printed and
    what it served, and returns its JSON summary."""
    import tensorflow_transform as tft

    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    proc = subprocess.run([exe, "demo", "--workdir", work, "--spans", "1", "--rows",
                           str(ROWS), "--train-steps", str(OPTIONS["train_steps"]), "--json"],
                          capture_output=True, text=True, timeout=900)
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


@pytest.mark.slow
def test_lifecycle_trains_warm_starts_gates_and_stops_bad_data_in_pipeline(tmp_path,
                                                                           raw_feeds):
    work = str(tmp_path / "work")
    data, base = os.path.join(work, "data"), os.path.join(work, runner.SERVING_DIR)
    root = os.path.join(base, "ctr")

    first = _demo(work, raw_feeds)  # span 1, the demo's settings (optimizer and AUC floor defaults)
    assert first["span"] == 1 and first["pushed_version"] == 1 and first["new_push"]
    assert first["training"]["retrained"] == 1 and first["training"]["warm_started_from"] is None
    first_weights = torch_model.load_state_dict(
        torch_model.folder_of(_latest_model(work, "PyTorchTrainer").uri))

    seen = {e.id for _, e in _executions(work)}
    again = runner.run_full(work, data, None, base, **OPTIONS)
    assert not again["new_push"] and again["served_versions"] == [1]
    assert again["push_reason"].startswith("identical to version 1")
    rerun = {name: e for name, e in _executions(work) if e.id not in seen}
    for name in DATA_STEPS:
        assert rerun[name].last_known_state == metadata_store_pb2.Execution.CACHED, name
    # The base model changed (none -> v1), so TFX runs the trainer again; v1 was trained
    # on these very examples, so it is re-emitted rather than trained on them twice.
    assert again["training"]["retrained"] == 0

    demo_data.write_demo_spans(data, spans=[2], rows_per_span=ROWS, files_per_span=1)
    second = runner.run_full(work, data, None, base, **OPTIONS)
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

    _shuffled_labels(data, 3)
    third = runner.run_full(work, data, None, base, **OPTIONS)
    assert third["span"] == 3 and third["training"]["retrained"] == 1
    assert not third["pushed"] and "Evaluator" in third["push_reason"]
    # ... with TFMA's own words for the threshold that failed.
    assert "(Evaluator: " in third["push_reason"] and "auc" in third["push_reason"].lower()
    assert serving.State.load(root).labels["stable"] == 2

    trainer_runs = sum(1 for name, _ in _executions(work) if name == "PyTorchTrainer")
    _planted_overflow(data, 4)
    with pytest.raises(AnomaliesFound, match=r"feature 'item_id' \(data_vs_consumer.range\)"):
        runner.run_full(work, data, None, base, **OPTIONS)
    assert sum(1 for name, _ in _executions(work) if name == "PyTorchTrainer") == trainer_runs

    assert serving.versions(root) == [1, 2]
    assert serving.State.load(root).labels["stable"] == 2
    assert not [d for d in os.listdir(root) if d.startswith(serving.STAGING_PREFIX)]
    # Version 2 answers a raw record, string country and all.
    served = tf.saved_model.load(os.path.join(root, "2"))
    out = served.signatures["serving_tf_example"](
        examples=tf.constant([_raw_eval_record(work)]))
    assert 0.0 < float(out["score"][0, 0]) < 1.0
