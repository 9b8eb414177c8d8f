"""MLMD about runs: executions a killed run left RUNNING are marked FAILED with why and
their empty output folders removed; progress lines follow executions as they start
and end."""
from __future__ import annotations

import os

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as pb
from tfx.orchestration import metadata as tfx_metadata

from tfx_bridge.pipelines.run_state import ABANDONED_PROPERTY, Progress, mark_abandoned


def _store(path):
    return metadata_store.MetadataStore(tfx_metadata.sqlite_metadata_connection_config(path))


def _execution(store, name: str, state, outputs=()):
    type_id = store.put_execution_type(pb.ExecutionType(name=f"tfx.components.{name}"))
    [eid] = store.put_executions([pb.Execution(type_id=type_id, last_known_state=state)])
    artifact_type = store.put_artifact_type(pb.ArtifactType(name="Model"))
    for uri in outputs:
        [aid] = store.put_artifacts([pb.Artifact(type_id=artifact_type, uri=uri,
                                                 state=pb.Artifact.PENDING)])
        store.put_events([pb.Event(artifact_id=aid, execution_id=eid,
                                   type=pb.Event.PENDING_OUTPUT)])
    return eid


def test_mark_abandoned_running_marked_failed_and_empty_outputs_removed(tmp_path):
    path = str(tmp_path / "metadata.sqlite")
    store = _store(path)
    empty, kept = tmp_path / "root" / "Trainer" / "model" / "7", tmp_path / "root" / "kept"
    empty.mkdir(parents=True)
    kept.mkdir(parents=True)
    (kept / "saved_model.pb").write_bytes(b"x")
    done = _execution(store, "StatisticsGen", pb.Execution.COMPLETE)
    killed = _execution(store, "Trainer", pb.Execution.RUNNING, [str(empty), str(kept)])
    lines = mark_abandoned(path)
    assert lines[0] == f"Trainer (execution {killed}): left RUNNING by a killed run, marked " \
        "FAILED"
    assert lines[1:] == [f"removed its empty output folder {empty}"]
    assert not empty.exists() and (kept / "saved_model.pb").exists()
    by_id = {e.id: e for e in _store(path).get_executions()}
    assert by_id[killed].last_known_state == pb.Execution.FAILED
    assert "its run was killed" in by_id[killed].custom_properties[ABANDONED_PROPERTY].string_value
    assert by_id[done].last_known_state == pb.Execution.COMPLETE
    assert mark_abandoned(path) == []  # nothing left RUNNING


def test_mark_abandoned_without_a_store_is_a_no_op(tmp_path):
    assert mark_abandoned(str(tmp_path / "none.sqlite")) == []
    assert not os.path.exists(tmp_path / "none.sqlite")


def test_progress_says_starts_and_ends_of_this_runs_executions_only(tmp_path):
    path = str(tmp_path / "metadata.sqlite")
    store = _store(path)
    _execution(store, "StatisticsGen", pb.Execution.COMPLETE)  # an earlier run's
    said = []
    progress = Progress(path, said.append, interval_s=3600)
    progress.start()
    try:
        trainer = _execution(store, "Trainer", pb.Execution.RUNNING)
        progress.poll()
        assert said == ["Trainer: started"]
        [e] = store.get_executions_by_id([trainer])
        e.last_known_state = pb.Execution.COMPLETE
        store.put_executions([e])
        _execution(store, "Evaluator", pb.Execution.CACHED)
    finally:
        progress.stop()
    assert said[1].startswith("Trainer: done in ") and said[1].endswith("s")
    assert said[2].startswith("Evaluator: cached in ")
    assert len(said) == 3


def test_outputs_since_are_this_runs_only_cached_reuse_included(tmp_path):
    """A run's summary reads its own executions' outputs: after a refused span, the
    newest Examples in MLMD are the refused run's, not this run's cached ones."""
    from tfx_bridge.pipelines.run_state import latest_execution_id, outputs_since

    path = str(tmp_path / "metadata.sqlite")
    store = _store(path)
    examples_type = store.put_artifact_type(pb.ArtifactType(name="Examples"))
    gen = store.put_execution_type(pb.ExecutionType(name="ParquetExampleGen"))

    def run(state, artifact_id=None, uri=None):
        [eid] = store.put_executions([pb.Execution(type_id=gen, last_known_state=state)])
        if artifact_id is None:
            [artifact_id] = store.put_artifacts([pb.Artifact(type_id=examples_type, uri=uri)])
        store.put_events([pb.Event(artifact_id=artifact_id, execution_id=eid,
                                   type=pb.Event.OUTPUT)])
        return artifact_id

    span_3 = run(pb.Execution.COMPLETE, uri="/root/ParquetExampleGen/examples/3")
    run(pb.Execution.COMPLETE, uri="/root/ParquetExampleGen/examples/4")  # refused later
    since = latest_execution_id(path)
    run(pb.Execution.CACHED, artifact_id=span_3)  # this run: span 3 again, cached
    produced = outputs_since(path, since)
    assert [a.uri for a in produced["Examples"]] == ["/root/ParquetExampleGen/examples/3"]
    assert outputs_since(path, latest_execution_id(path)) == {}


def _evaluation(folder, failures, mean_label=None):
    """An Evaluator output as TFMA 0.47 writes it (measured: an AUC over one label
    class is written as 0.0, with no message): validations.tfrecord and metrics."""
    import tensorflow as tf
    from tensorflow_model_analysis.proto import metrics_for_slice_pb2 as mfs
    from tensorflow_model_analysis.proto import validation_result_pb2 as vr

    folder.mkdir()
    result = vr.ValidationResult(validation_ok=False)
    added = result.metric_validations_per_slice.add().failures
    for name, value, lower, message in failures:
        failure = added.add(message=message)
        failure.metric_key.name, failure.metric_key.model_name = name, "candidate"
        failure.metric_value.double_value.value = value
        failure.metric_threshold.value_threshold.lower_bound.value = lower
    with tf.io.TFRecordWriter(str(folder / "validations.tfrecord")) as w:
        w.write(result.SerializeToString())
    metrics = mfs.MetricsForSlice()
    if mean_label is not None:
        kv = metrics.metric_keys_and_values.add()
        kv.key.name, kv.key.model_name = "mean_label", "candidate"
        kv.value.double_value.value = mean_label
    with tf.io.TFRecordWriter(str(folder / "metrics-00000-of-00001.tfrecord")) as w:
        w.write(metrics.SerializeToString())
    return str(folder)


def test_evaluator_reason_names_failed_thresholds_and_an_undefined_auc(tmp_path):
    from tfx_bridge.pipelines.runner import evaluator_reason

    one_class = _evaluation(tmp_path / "one", [("auc", 0.0, 0.5, "")], mean_label=0.0)
    assert evaluator_reason(one_class) == "AUC undefined: every eval label is 0"
    low = _evaluation(tmp_path / "low", [
        ("auc", 0.48, 0.5, ""),
        ("loss", 0.9, 0.0, "Metric loss with value 0.9 is above the upper bound 0.7")],
        mean_label=0.3)
    assert evaluator_reason(low) == ("auc 0.48 is below the lower bound 0.5; Metric loss "
                                     "with value 0.9 is above the upper bound 0.7")
    assert evaluator_reason(str(tmp_path / "none")) is None


def test_progress_stop_never_raises_when_stderr_is_gone(tmp_path):
    path = str(tmp_path / "metadata.sqlite")
    store = _store(path)

    def gone(line):
        raise BrokenPipeError(32, "Broken pipe")

    progress = Progress(path, gone, interval_s=3600)
    progress.start()
    _execution(store, "Trainer", pb.Execution.RUNNING)
    progress.stop()  # the last poll's write fails: the run's own outcome stands
