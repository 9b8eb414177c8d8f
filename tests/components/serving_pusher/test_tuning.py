"""ServingPusher's serving tuning: session threads from the target's cores, the CPU
allocator in the manifest's environment, batching
from the model's measured latency curve, given values winning, unreadable reports
falling back to the defaults with a note."""
from __future__ import annotations

import json
import os

import pytest
import yaml
from google.protobuf import text_format

from tfx_bridge import cpu_allocator
from tfx_bridge.components.serving_pusher import base_layout, server_config, serving, tuning
from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.errors import PusherConfigError
from tfx_bridge.components.serving_pusher.tuning import LatencyPoint, Session

CPU = base_layout.BATCHING_DEFAULTS["cpu"]


def _report(folder, latency, candidate="xla", **extra):
    """An optimizer-shaped report.json: the kept candidate's p50/p99 per batch."""
    os.makedirs(folder, exist_ok=True)
    doc = {"blessed": True, "candidate": candidate,
           "candidates": [{"name": "original", "latency": []},
                          {"name": candidate, "latency": [
                              {"batch": b, "p50_ms": p50, "p99_ms": p99}
                              for b, p50, p99 in latency]}], **extra}
    with open(os.path.join(folder, "report.json"), "w") as f:
        json.dump(doc, f)
    return str(folder)


def _config(tmp_path, **kwargs):
    return PusherConfig(str(tmp_path / "serving"), "ctr", **kwargs)


def test_derive_batching_flat_curve_single_row_batches_no_wait():
    flat = [LatencyPoint(1, 1.0, 1.4), LatencyPoint(32, 31.0, 40.0)]
    values = tuning.derive_batching(flat, cores=4)["values"]
    assert values["max_execution_batch_size"] == 1 and values["allowed_batch_sizes"] == [1]
    assert values["batch_timeout_micros"] == 0
    # Requests as large as today's default are still accepted, split into single rows.
    assert values["max_batch_size"] == CPU["max_batch_size"]
    assert values["enable_large_batch_splitting"] is True
    assert values["num_batch_threads"] == 4


def test_derive_batching_falling_row_cost_largest_falling_batch():
    curve = [LatencyPoint(1, 2.0, 3.0), LatencyPoint(8, 4.0, 6.0), LatencyPoint(32, 20.0, 30.0)]
    values = tuning.derive_batching(curve, cores=2)["values"]
    # 2.0 -> 0.5 ms per row at 8 rows; 0.625 at 32 rows is no longer falling.
    assert values["max_execution_batch_size"] == 8
    assert values["allowed_batch_sizes"] == [1, 2, 4, 8]
    steep = [LatencyPoint(1, 2.0, 3.0), LatencyPoint(8, 4.0, 6.0), LatencyPoint(64, 16.0, 24.0)]
    values = tuning.derive_batching(steep, cores=2)["values"]
    assert values["max_execution_batch_size"] == 64 and values["max_batch_size"] == 64
    assert values["allowed_batch_sizes"] == [1, 2, 4, 8, 16, 32, 64]


def test_derive_batching_rising_tail_batch_not_kept():
    curve = [LatencyPoint(1, 2.0, 3.0), LatencyPoint(32, 16.0, 200.0)]
    assert tuning.derive_batching(curve, cores=2)["values"]["max_execution_batch_size"] == 1


@pytest.mark.parametrize("p50_one", [0.05, 0.5, 2.0, 40.0])
def test_derive_batching_timeout_below_share_of_batch_one_latency(p50_one):
    curve = [LatencyPoint(1, p50_one, None), LatencyPoint(32, p50_one * 4, None)]
    derived = tuning.derive_batching(curve, cores=2)
    timeout = derived["values"]["batch_timeout_micros"]
    # Never above the CPU default, whatever the batch-1 latency.
    assert 0 < timeout <= tuning.MAX_TIMEOUT_MICROS == CPU["batch_timeout_micros"]
    assert timeout <= tuning.TIMEOUT_SHARE * derived["row_saving"] * p50_one * 1000


def test_tune_measured_report_derives_sizes_and_records_origins(tmp_path):
    model = _report(tmp_path / "model", [(1, 2.0, 3.0), (32, 16.0, 20.0)])
    result = tuning.tune(_config(tmp_path, target_cores=3), model)
    assert result.session == Session(3, 3, 3, "bfc")
    assert result.batching["max_execution_batch_size"] == 32
    assert result.batching["num_batch_threads"] == 3
    assert result.origins["max_execution_batch_size"] == "measured"
    assert result.origins["num_batch_threads"] == "cores"
    assert result.origins["max_enqueued_batches"] == "default"
    assert result.origins["target_cores"] == "given"
    record = result.record()
    assert record["measurement"]["candidate"] == "xla"
    assert [p["batch"] for p in record["measurement"]["latency_ms"]] == [1, 32]
    assert record["session"] == {"tensorflow_intra_op_parallelism": 3,
                                 "tensorflow_inter_op_parallelism": 3}


def test_tune_given_values_win_over_derived(tmp_path):
    model = _report(tmp_path / "model", [(1, 2.0, 3.0), (32, 16.0, 20.0)])
    config = _config(tmp_path, target_cores=3, inter_op_parallelism=1,
                     batching_parameters={"batch_timeout_micros": 5, "max_batch_size": 16})
    result = tuning.tune(config, model)
    assert result.session.inter_op == 1 and result.origins[
        "tensorflow_inter_op_parallelism"] == "given"
    assert result.batching["batch_timeout_micros"] == 5
    assert result.origins["batch_timeout_micros"] == "given"
    # A given batch size makes the user the owner of every size field.
    assert result.batching["max_batch_size"] == 16
    assert "max_execution_batch_size" not in result.batching
    assert any("none derived" in note for note in result.notes)
    server_config.batching_text("cpu", result.batching)


def test_tune_importer_report_keeps_defaults_with_note(tmp_path):
    folder = tmp_path / "imported"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"blessed": True, "max_abs_error": 0.0}))
    result = tuning.tune(_config(tmp_path, target_cores=2), str(folder))
    assert result.batching == {**CPU, "num_batch_threads": 2}
    assert result.measurement is None
    assert any("no latency measurements" in n for n in result.notes)
    assert any("keep the cpu defaults" in n for n in result.notes)


@pytest.mark.parametrize("content", [
    "{not json", "[1, 2]", json.dumps({"candidate": "x", "candidates": "garbled"}),
    json.dumps({"candidate": "x", "candidates": [{"name": "x", "latency": [
        {"batch": "one", "p50_ms": "fast"}, {"batch": 32, "p50_ms": -1}]}]}),
    json.dumps({"candidate": "x", "candidates": [{"name": "x", "latency": [None, 3]}]}),
])
def test_tune_garbled_report_defaults_with_note(tmp_path, content):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "report.json").write_text(content)
    result = tuning.tune(_config(tmp_path, target_cores=2), str(folder))
    assert result.batching == {**CPU, "num_batch_threads": 2}
    assert result.notes and result.measurement is None


def test_tune_missing_report_defaults_host_cores(tmp_path):
    result = tuning.tune(_config(tmp_path), str(tmp_path / "nowhere"))
    assert result.session.cores == tuning.usable_cores() >= 1
    assert result.origins["target_cores"] == "host"
    assert any("does not exist" in n for n in result.notes)


def test_tune_p50_only_report_derives_from_p50(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(
        {"latency_after_ms": {"p50_ms_batch_1": 2.0, "p50_ms_batch_32": 8.0}}))
    result = tuning.tune(_config(tmp_path, target_cores=2), str(folder))
    assert result.batching["max_execution_batch_size"] == 32
    assert "p50 only" in result.measurement["figures"]


def test_batching_text_derived_parses_as_batching_parameters(tmp_path):
    model = _report(tmp_path / "model", [(1, 2.0, 3.0), (8, 4.0, 6.0)])
    text = server_config.batching_text("cpu", tuning.tune(_config(tmp_path, target_cores=2),
                                                          model).batching)
    message = text_format.Parse(text, server_config.batching_message()())
    assert message.enable_large_batch_splitting.value is True
    assert message.max_execution_batch_size.value == 8
    assert list(message.allowed_batch_sizes) == [1, 2, 4, 8]
    assert message.max_batch_size.value == CPU["max_batch_size"]


@pytest.mark.parametrize("given, match", [
    ({"allowed_batch_sizes": [1, 8]}, r"must end at max_batch_size \(32\)"),
    ({"allowed_batch_sizes": [4, 2, 32]}, r"must increase"),
    ({"enable_large_batch_splitting": True, "max_execution_batch_size": 64},
     r"max_execution_batch_size 64 exceeds max_batch_size 32"),
    ({"num_batch_threads": 0}, r"num_batch_threads must be an int >= 1"),
])
def test_config_batching_tf_serving_would_refuse_refused(tmp_path, given, match):
    with pytest.raises(PusherConfigError, match=match):
        _config(tmp_path, batching_parameters=given)


@pytest.mark.parametrize("field", ["target_cores", "intra_op_parallelism",
                                   "inter_op_parallelism"])
def test_config_thread_count_below_one_refused(tmp_path, field):
    with pytest.raises(PusherConfigError, match=f"{field} must be >= 1"):
        _config(tmp_path, **{field: 0})


def test_k8s_manifest_session_flags_and_cpu_limit(tmp_path):
    base = tmp_path / "serving"
    base.mkdir()
    text = server_config.k8s_manifest(str(base), "cpu", [], session=Session(6, 6, 2))
    container = next(yaml.safe_load_all(text))["spec"]["template"]["spec"]["containers"][0]
    assert "--tensorflow_intra_op_parallelism=6" in container["args"]
    assert "--tensorflow_inter_op_parallelism=2" in container["args"]
    assert container["resources"]["limits"]["cpu"] == "6"


def _container_env(text):
    container = next(yaml.safe_load_all(text))["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_k8s_manifest_bfc_session_allocator_capped_below_memory_limit(tmp_path):
    base = tmp_path / "serving"
    base.mkdir()
    env = _container_env(server_config.k8s_manifest(str(base), "cpu", [],
                                                     session=Session(2, 2, 2, "bfc")))
    assert env == {cpu_allocator.USE_BFC_VAR: "true", cpu_allocator.BFC_LIMIT_VAR: "7168"}
    assert server_config.MEMORY_LIMIT_MB == 8192  # the 8Gi limit the 7168 is 7/8 of


@pytest.mark.parametrize("target,allocator,expected", [
    ("cpu", None, "bfc"), ("gpu", None, "malloc"), ("cpu", "malloc", "malloc"),
    ("gpu", "bfc", "bfc")])
def test_tune_cpu_allocator_target_default_or_given_in_manifest(tmp_path, target, allocator,
                                                                expected):
    result = tuning.tune(_config(tmp_path, target=target, target_cores=2,
                                 cpu_allocator=allocator))
    assert result.session.cpu_allocator == expected
    assert result.record()["cpu_allocator"] == expected
    assert result.origins["cpu_allocator"] == ("given" if allocator else "default")
    base = tmp_path / "serving"
    base.mkdir()
    env = _container_env(server_config.k8s_manifest(str(base), target, [],
                                                     session=result.session))
    assert (env.get(cpu_allocator.USE_BFC_VAR) == "true") == (expected == "bfc")


def test_config_unknown_cpu_allocator_refused(tmp_path):
    with pytest.raises(PusherConfigError, match="cpu_allocator 'tcmalloc': use one of"):
        _config(tmp_path, cpu_allocator="tcmalloc")


@pytest.mark.parametrize("recorded,expected", [
    ({"cores": 2, "intra_op": 2, "inter_op": 1}, Session(2, 2, 1, "malloc")),
    ({"cores": 2, "intra_op": 2, "inter_op": 1, "cpu_allocator": "bfc"},
     Session(2, 2, 1, "bfc")),
    ({"cores": 2, "intra_op": 2, "inter_op": 1, "cpu_allocator": "jemalloc"},
     Session(2, 2, 1, "malloc")),
    ({"cores": 2, "intra_op": 2}, None), ("not a dict", None)])
def test_session_from_dict_missing_or_unknown_allocator_tf_default_threads_kept(recorded,
                                                                                 expected):
    # A session recorded before pushes chose an allocator ran TF's own.
    assert Session.from_dict(recorded) == expected


def test_rollback_state_without_allocator_serves_tf_default_allocator(models, tmp_path):
    base = str(tmp_path / "serving")
    assert serving.push_model(PusherConfig(base, "ctr", target_cores=2), models["a"]).pushed
    state_path = os.path.join(base, "ctr", base_layout.STATE_FILE)
    state = json.load(open(state_path))
    del state["session"]["cpu_allocator"]  # as a state written before the field
    with open(state_path, "w") as f:
        json.dump(state, f)
    serving.rollback(base, "ctr", 1)
    manifest = open(os.path.join(base, base_layout.K8S_MANIFEST)).read()
    assert cpu_allocator.USE_BFC_VAR not in _container_env(manifest)
    assert "--tensorflow_intra_op_parallelism=2" in manifest


def test_push_model_serves_measured_tuning_and_rollback_keeps_it(models, tmp_path):
    model = _report(tmp_path / "model", [(1, 2.0, 3.0), (32, 16.0, 20.0)])
    base = str(tmp_path / "serving")
    config = PusherConfig(base, "ctr", target_cores=3, cpu_allocator="malloc")
    result = serving.push_model(config, model, saved_model_dir=models["a"],
                                report_dir=str(tmp_path))
    assert result.pushed
    pushed = json.load(open(tmp_path / base_layout.PUSH_REPORT))["serving_config"]
    assert pushed["origins"]["max_execution_batch_size"] == "measured"
    assert pushed["measurement"]["report"] == os.path.join(model, "report.json")
    state = json.load(open(os.path.join(base, "ctr", base_layout.STATE_FILE)))
    assert state["tuning"]["batching"] == pushed["batching"]
    serving.rollback(base, "ctr", 1)
    manifest = open(os.path.join(base, base_layout.K8S_MANIFEST)).read()
    assert "--tensorflow_intra_op_parallelism=3" in manifest
    # The recorded allocator, not the cpu default.
    assert cpu_allocator.USE_BFC_VAR not in _container_env(manifest)
    batching = text_format.Parse(open(os.path.join(base, base_layout.BATCHING_FILE)).read(),
                                 server_config.batching_message()())
    assert batching.max_execution_batch_size.value == 32
    assert batching.num_batch_threads.value == 3


def _session_report(folder, inter_op, cores):
    return _report(folder, [(1, 2.0, 3.0), (32, 16.0, 20.0)], session={
        "cores": cores, "intra_op_parallelism": cores, "inter_op_parallelism": inter_op,
        "reason": "measured"})


def test_tune_measured_calling_thread_same_cores_served_with_minus_one(tmp_path):
    model = _session_report(tmp_path / "model", -1, 3)
    result = tuning.tune(_config(tmp_path, target_cores=3), model)
    assert result.session.inter_op == -1 and result.session.intra_op == 3
    assert result.origins["tensorflow_inter_op_parallelism"] == "measured"
    assert "--tensorflow_inter_op_parallelism=-1" in result.session.flags()
    record = result.record()
    assert record["session_measurement"]["report"] == os.path.join(model, "report.json")
    assert record["session"]["tensorflow_inter_op_parallelism"] == -1


@pytest.mark.parametrize("cores,target,inter_op", [(2, "cpu", -1), (3, "gpu", -1),
                                                    (3, "cpu", None)])
def test_tune_calling_thread_other_cores_gpu_or_pool_kept_not_applied(tmp_path, cores,
                                                                      target, inter_op):
    model = _session_report(tmp_path / "model", inter_op, cores)
    result = tuning.tune(_config(tmp_path, target_cores=3, target=target), model)
    assert result.session.inter_op == 3
    assert result.origins["tensorflow_inter_op_parallelism"] == "cores"
    assert result.session_measurement is None
    if inter_op is not None:  # a measurement not applied says why
        assert any("not applied" in n or "not applied to a gpu" in n for n in result.notes)


def test_tune_calling_thread_measured_with_other_intra_op_not_applied_naming_both(tmp_path):
    model = _session_report(tmp_path / "model", -1, 3)
    result = tuning.tune(_config(tmp_path, target_cores=3, intra_op_parallelism=1), model)
    assert result.session.inter_op == 3 and result.session.intra_op == 1
    assert result.origins["tensorflow_inter_op_parallelism"] == "cores"
    assert any("with 3 intra-op threads, not the 1 served: not applied" in n
               for n in result.notes)
    same = tuning.tune(_config(tmp_path, target_cores=3, intra_op_parallelism=3), model)
    assert same.session.inter_op == -1


def test_tune_given_inter_op_wins_over_measured_calling_thread(tmp_path):
    model = _session_report(tmp_path / "model", -1, 3)
    result = tuning.tune(_config(tmp_path, target_cores=3, inter_op_parallelism=2), model)
    assert result.session.inter_op == 2
    assert result.origins["tensorflow_inter_op_parallelism"] == "given"


def test_config_inter_op_calling_thread_accepted_other_negatives_refused(tmp_path):
    assert _config(tmp_path, inter_op_parallelism=-1).inter_op_parallelism == -1
    with pytest.raises(PusherConfigError, match="or -1 to run each call in its calling"):
        _config(tmp_path, inter_op_parallelism=-2)
    with pytest.raises(PusherConfigError, match="intra_op_parallelism must be >= 1"):
        _config(tmp_path, intra_op_parallelism=-1)


def test_push_measured_calling_thread_in_manifest_and_rollback_keeps_it(models, tmp_path):
    model = _session_report(tmp_path / "model", -1, 3)
    base = str(tmp_path / "serving")
    config = PusherConfig(base, "ctr", target_cores=3)
    assert serving.push_model(config, model, saved_model_dir=models["a"],
                              report_dir=str(tmp_path)).pushed
    manifest = os.path.join(base, base_layout.K8S_MANIFEST)
    assert "--tensorflow_inter_op_parallelism=-1" in open(manifest).read()
    serving.rollback(base, "ctr", 1)
    assert "--tensorflow_inter_op_parallelism=-1" in open(manifest).read()
