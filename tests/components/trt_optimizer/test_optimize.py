"""TrtOptimizer: TensorRT detection, the CPU path end to end, the drift gate, the CLI."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402

from tfx_bridge.artifacts import savedmodel  # noqa: E402
from tfx_bridge.components.trt_optimizer import (  # noqa: E402
    candidates,
    detect,
    inputs,
    measure,
    measure_worker,
    optimize,
    results,
)
from tfx_bridge.components.trt_optimizer.config import OptimizerConfig  # noqa: E402
from tfx_bridge.components.trt_optimizer.errors import OptimizerConfigError  # noqa: E402


@functools.cache
def probe() -> detect.Probe:
    """The TensorRT probe, run once and only when a test needs it (not at collection)."""
    return detect.probe()


@pytest.fixture(scope="module")
def imported_moe(reference_imports):
    """The top-k MoE imported once per session (conftest.reference_imports)."""
    return os.path.dirname(reference_imports["moe"].serving_dir)


@pytest.fixture(scope="module")
def imported_mlp(reference_imports):
    return os.path.dirname(reference_imports["mlp"].serving_dir)


def _perturbed(loaded, out):
    """A fast variant that is wrong: XLA over frozen weights, scores nudged by 1e-3."""
    built = candidates.build_cpu_candidate("xla-frozen", loaded, out + "_inner")
    inner = tf.saved_model.load(out + "_inner")
    fn = inner.signatures["serving_default"]
    specs = fn.structured_input_signature[1]
    names = sorted(specs)
    module = tf.Module()
    module.inner = inner

    @tf.function(input_signature=[tf.TensorSpec(specs[n].shape, specs[n].dtype, name=n)
                                  for n in names], jit_compile=True)
    def serve(*args):
        out = fn(**dict(zip(names, args, strict=True)))
        return {k: (v + 1e-3 if v.dtype.is_floating else v) for k, v in out.items()}

    module.serve = serve
    tf.saved_model.save(module, out, signatures={"serving_default": serve.get_concrete_function()})
    return built


def test_probe_without_tensorrt_reports_reason_and_survives():
    """get_loaded_tensorrt_version() would abort this process; the probe runs it nowhere
    unsafe and says why TensorRT is out."""
    assert isinstance(probe(), detect.Probe)
    if not probe().tensorrt:
        assert "libnvinfer" in probe().why_not() or "probe" in probe().why_not()
        assert probe().linked_version in (None, "8.6.1")
    assert not probe().can_run_tensorrt or probe().gpus > 0


@pytest.mark.slow
def test_cpu_path_end_to_end_rejects_perturbed_candidate(imported_moe, tmp_path):
    out = str(tmp_path / "opt")
    result = optimize.optimize(imported_moe, out, OptimizerConfig(
        iterations=30, candidates=candidates.CPU_CANDIDATES), probe=probe(),
        extra_candidates={"perturbed": _perturbed})
    report = result.report
    by_name = {c["name"]: c for c in report["candidates"]}
    assert by_name["perturbed"]["passed"] is False  # the drift gate rejected it
    bad = [d for d in by_name["perturbed"]["drift"] if not d["ok"]]
    assert bad and all(d["output"] == "score" for d in bad)
    assert report["candidate"] != "perturbed" and result.blessed
    # The experts' GELU needs Erf, which TF Serving's TFLite lacks: lowered, then checked.
    assert by_name["tflite"]["passed"]
    assert any("Erf lowered" in n for n in by_name["tflite"]["notes"])
    assert report["tensorrt"]["ran"] is False and result.backend != "tensorrt"
    assert result.requires_gpu is False
    if result.backend == "xla-cpu":
        assert result.serving_flags == [savedmodel.XLA_FLAG]
        sigs = tf.saved_model.load(os.path.join(out, "Format-Serving")).signatures
        assert {"serving_default", "serving_default_noxla", "serving_tf_example"} <= set(sigs)
    for name in (results.REPORT_JSON, results.REPORT_MD, results.REPORT_PNG):
        assert os.path.getsize(os.path.join(out, name)) > 0
    # The kept model still computes what the original computed, experts exactly.
    x = np.random.default_rng(9).uniform(-1, 1, (32, 16)).astype(np.float32)
    orig = tf.saved_model.load(os.path.join(imported_moe, "Format-Serving"))
    new = tf.saved_model.load(os.path.join(out, "Format-Serving"))
    a = orig.signatures["serving_default"](x=tf.constant(x))
    b = new.signatures["serving_default"](x=tf.constant(x))
    np.testing.assert_array_equal(a["experts"].numpy(), b["experts"].numpy())
    np.testing.assert_allclose(a["score"].numpy(), b["score"].numpy(), atol=1e-5)


@pytest.mark.slow
def test_default_cpu_run_needs_no_experimental_serving_flag(imported_mlp, tmp_path):
    out = str(tmp_path / "opt")
    result = optimize.optimize(imported_mlp, out, OptimizerConfig(iterations=20), probe=probe())
    names = [c["name"] for c in result.report["candidates"]]
    assert names == ["original", *candidates.DEFAULT_CPU_CANDIDATES]
    assert "tflite" not in names and not any(n.startswith("xla") for n in names)
    assert result.serving_flags == [] and result.report["serving_flags"] == []
    assert not os.path.exists(os.path.join(out, "Format-Serving", savedmodel.TFLITE_FILE))
    decision = result.report["decision"]
    assert decision["kept"] == result.report["candidate"]
    # The medians the choice compared were timed as stock TF Serving's CPU build runs,
    # with the allocator the pusher's manifest gives it.
    assert result.report["timing"]["onednn"] == "0"
    assert result.report["timing"]["cpu_allocator"] == "bfc"
    assert result.report["timing"]["seconds"] > 0
    # TF Serving's session threads for the kept graph, by the same rule.
    session = result.report["session"]
    assert session["timed"].startswith("Session::Run") and session["cores"] >= 1
    won = (len(session["speedup"]) == len(result.report["batches"])
           and all(s["refused"] is None for s in session["speedup"]))
    assert (session["inter_op_parallelism"] == -1) == won
    assert "Session threads (Session::Run" in open(os.path.join(out, "report.md")).read()
    frozen = next(c for c in result.report["candidates"] if c["name"] == "frozen")
    # Batch sizes are judged smallest first; one refused there is not timed further.
    judged = [s["batch"] for s in frozen["speedup"]]
    assert judged == list(results.DEFAULT_BATCHES)[:len(judged)] and judged
    if result.backend == results.BACKEND_ORIGINAL:
        assert result.report["latency_after_ms"] == result.report["latency_before_ms"]
        note = result.report["serving_notes"][-1]
        assert note.startswith("Kept the original SavedModel (candidates tried: frozen): frozen "
                               "at batch ")
        assert f"tflite ({savedmodel.TFLITE_FLAG})" in note
        assert "Kept the original SavedModel" in open(os.path.join(out, "report.md")).read()
    else:
        assert all(s["refused"] is None and s["bound"] <= 0.95 for s in frozen["speedup"])


@pytest.mark.slow
def test_optimize_model_folder_on_s3_writes_whole_artifact_there(imported_mlp, s3_bucket):
    from tfx_bridge.storage import fs
    from tfx_bridge.torch import model as torch_model

    source, out = fs.join(s3_bucket, "imported"), fs.join(s3_bucket, "optimized")
    fs.copy_tree(imported_mlp, source)
    # Given the SavedModel inside the Model folder, as the executor gives it.
    result = optimize.optimize(fs.join(source, results.SERVING_DIR), out,
                               OptimizerConfig(iterations=10), probe=probe())
    assert result.blessed
    assert sorted(fs.listdir(out)) == sorted(os.listdir(imported_mlp) + ["latency.png"])
    weights = torch_model.folder_of(imported_mlp)
    for name in os.listdir(weights):
        assert fs.read_bytes(fs.join(torch_model.folder_of(out), name)) == \
            open(os.path.join(weights, name), "rb").read()


@pytest.mark.slow
def test_tflite_candidate_matches_original_and_keeps_savedmodel(imported_mlp, tmp_path):
    out = str(tmp_path / "opt")
    result = optimize.optimize(imported_mlp, out, OptimizerConfig(iterations=30,
                                                                  candidates=["tflite"]),
                               probe=probe())
    lite = next(c for c in result.report["candidates"] if c["name"] == "tflite")
    assert lite["passed"] and lite["error"] is None and len(lite["latency"]) == 2
    assert result.blessed and result.backend in ("original", "tflite-cpu")
    serving_dir = os.path.join(out, "Format-Serving")
    # Whatever was kept, the SavedModel is there (servers without the flag serve it).
    sigs = tf.saved_model.load(serving_dir).signatures
    assert {"serving_default", "serving_tf_example"} <= set(sigs)
    if result.backend == "tflite-cpu":
        assert result.serving_flags == [savedmodel.TFLITE_FLAG]
        note = result.report["serving_notes"][0]
        assert "serving_tf_example stays in the SavedModel" in note
        assert "marked experimental in TF Serving, server-wide" in note
        servable = measure.load_servable(serving_dir, result.serving_flags)
        x = np.random.default_rng(3).normal(size=(7, 8)).astype(np.float32)
        want = sigs["serving_default"](x=tf.constant(x))["logits"].numpy()
        np.testing.assert_allclose(servable.outputs({"x": x})["logits"], want, atol=1e-5)


def test_engines_only_sets_then_restores_environment(monkeypatch):
    monkeypatch.setenv(candidates.NATIVE_SEGMENT_ENV, "True")
    with candidates.engines_only(True):
        assert os.environ[candidates.NATIVE_SEGMENT_ENV] == "False"
    assert os.environ[candidates.NATIVE_SEGMENT_ENV] == "True"
    monkeypatch.delenv(candidates.NATIVE_SEGMENT_ENV)
    with pytest.raises(RuntimeError), candidates.engines_only(True):
        raise RuntimeError("validation failed")
    assert candidates.NATIVE_SEGMENT_ENV not in os.environ


def test_drift_changed_dtype_shape_or_missing_output_is_drift_naming_the_change():
    ref = {"experts": np.array([[0, 1]], np.int64)}
    [d] = measure.drift(ref, {"experts": ref["experts"].astype(np.int32)}, 1e-4, 0.0, 1.0)
    assert not d.ok and d.changed == "dtype int64 -> int32"
    [d] = measure.drift(ref, {"experts": np.array([[0, 1, 2]])}, 1e-4, 0.0, 1.0)
    assert not d.ok and d.changed == "shape [1, 2] -> [1, 3]"
    [d] = measure.drift(ref, {}, 1e-4, 0.0, 1.0)
    assert not d.ok and d.changed == "missing"
    [d] = measure.drift(ref, ref, 1e-4, 0.0, 1.0)
    assert d.ok and d.changed is None


def test_optimize_unknown_candidate_refused(imported_mlp, tmp_path):
    with pytest.raises(OptimizerConfigError, match=r"unknown candidates \['onnxruntime'\]"):
        optimize.optimize(imported_mlp, str(tmp_path / "o"),
                          OptimizerConfig(candidates=["onnxruntime"]))


def test_drift_integer_outputs_exact_or_topk_threshold():
    ref = {"experts": np.array([[0, 1], [2, 3]]), "score": np.array([0.5, 0.25], np.float32)}
    swapped = {"experts": np.array([[1, 0], [2, 3]]), "score": ref["score"]}
    exact = measure.drift(ref, swapped, 1e-4, 0.0, 1.0)
    assert [d.ok for d in exact if d.output == "experts"] == [False]
    relaxed = measure.drift(ref, swapped, 1e-4, 0.0, 0.99)
    experts = next(d for d in relaxed if d.output == "experts")
    assert experts.ok and experts.topk_agreement == 1.0  # same sets, other order
    off = measure.drift(ref, {"experts": ref["experts"], "score": ref["score"] + 1e-3},
                         1e-4, 0.0, 1.0)
    assert [d.ok for d in off if d.output == "score"] == [False]


def test_optimize_fp16_without_tensorrt_refused(imported_moe, tmp_path):
    if probe().can_run_tensorrt:
        pytest.skip("this host has TensorRT: fp16 is allowed here")
    with pytest.raises(OptimizerConfigError, match=r"precision fp16 needs TensorRT"):
        optimize.optimize(imported_moe, str(tmp_path / "o"), OptimizerConfig(precision="fp16"),
                          probe=probe())


@pytest.mark.gpu
@pytest.mark.tensorrt
def test_tensorrt_fp16_conversion_runs_engines(imported_moe, tmp_path):
    if not probe().can_run_tensorrt:
        pytest.skip(f"TensorRT cannot run here: {probe().why_not()}")
    out = str(tmp_path / "trt")
    result = optimize.optimize(imported_moe, out, OptimizerConfig(
        precision="fp16", iterations=30, topk_threshold=0.95, atol=1e-2), probe=probe())
    assert result.backend == "tensorrt" and result.requires_gpu
    assert result.report["tensorrt"]["ran"] is True
    assert os.path.exists(os.path.join(out, "Format-Serving", "trt_summary.txt"))


@pytest.mark.slow
def test_cli_optimize_json_reports_backend(imported_moe, tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    proc = subprocess.run([exe, "optimize", "--model", imported_moe, "--output",
                           str(tmp_path / "o"), "--iterations", "20", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["backend"] in candidates.CPU_BACKENDS
    assert summary["tensorrt_ran"] is False and summary["requires_gpu"] is False
    assert "TensorRT: not used" in proc.stderr


def test_representative_inputs_held_out_rows_disjoint_from_timing_rows(tmp_path):
    from tfx_bridge.artifacts import tensorspec

    split = tmp_path / "Split-eval"
    split.mkdir()
    with tf.io.TFRecordWriter(str(split / "data.gz"), options="GZIP") as writer:
        for i in range(100):
            ex = tf.train.Example()
            ex.features.feature["x"].int64_list.value.append(i)
            writer.write(ex.SerializeToString())
    specs = [tensorspec.TensorSpec("x", "int64", (-1,))]
    timing = inputs.representative_inputs(specs, 32, seed=1, examples_dir=str(tmp_path))
    held = inputs.representative_inputs(specs, 32, seed=2, examples_dir=str(tmp_path),
                                          held_out=True)
    assert len(timing["x"]) == len(held["x"]) == 32
    assert not set(timing["x"].tolist()) & set(held["x"].tolist())


def test_drift_float_output_records_its_largest_finite_value_integer_none():
    ref = {"logits": np.array([[-242.0, 3.0, -np.inf]], np.float32),
           "experts": np.array([[0, 1]], np.int64)}
    got = {"logits": ref["logits"] + np.float32(5e-4), "experts": ref["experts"]}
    by_name = {d.output: d for d in measure.drift(ref, got, 1e-4, 0.0, 1.0)}
    assert not by_name["logits"].ok and by_name["logits"].scale == 242.0
    assert by_name["experts"].ok and by_name["experts"].scale is None


def test_optimize_timing_past_its_limit_keeps_original_session_not_timed_again(
        imported_mlp, tmp_path, monkeypatch):
    children = []

    def too_slow(folders, feeds, budget_s, *args, timeout_s=None, **kwargs):
        children.append(sorted(folders))
        raise subprocess.TimeoutExpired("timing child", timeout_s)
    monkeypatch.setattr(measure_worker, "time_in_child", too_slow)
    out = str(tmp_path / "opt")
    result = optimize.optimize(imported_mlp, out, OptimizerConfig(iterations=20), probe=probe())
    assert result.report["candidate"] == "original" and result.blessed
    assert children == [["frozen", "original"]]  # the session measurement not started
    assert result.report["session"]["inter_op_parallelism"] is None
    assert result.report["session"]["reason"].startswith(
        "not measured (the candidates' timing did not finish: ")
    with open(os.path.join(out, "report.md")) as f:
        assert "Timing: not finished: " in f.read()
