"""Every CLI refusal: one message naming the input and the fix, exit 2, no traceback.

Run in-process with file-descriptor capture, so library log lines (Beam's
DoFn error log, TF's C++ logs) would show up as they would on a terminal.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfx_bridge import cli


def _main(capfd, *args):
    """(exit code, stdout, stderr) of ``tfx-bridge ARGS`` in this process."""
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse usage errors
        code = e.code
    out, err = capfd.readouterr()
    return code, out, err


def _parquet(folder, table, name="d.parquet"):
    os.makedirs(folder, exist_ok=True)
    pq.write_table(table, os.path.join(folder, name))
    return str(folder)


def _refused(code, err, *needles):
    assert code == cli.EXIT_BAD_INPUT, err
    assert "Traceback" not in err and "ERROR apache_beam" not in err, err
    assert "internal error" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("table,needle", [
    (pa.table({"a": pa.array([[1, 2], [3, None]], pa.list_(pa.int64()))}),
     "Column 'a' in d.parquet (row 1): null inside a list"),
    (pa.table({"a": pa.array([1, 2**64 - 1], pa.uint64())}),
     "uint64 value 18446744073709551615 exceeds int64 max"),
])
def test_cli_ingest_bad_values_one_message_exit_2(tmp_path, capfd, table, needle):
    base = _parquet(tmp_path / "in", table)
    code, _, err = _main(capfd, "ingest", "--input-base", base, "--output",
                         str(tmp_path / "out"), "--quiet")
    _refused(code, err, needle)
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1


@pytest.mark.parametrize("rows", [0, 3])
def test_cli_ingest_split_without_records_refused_naming_it_unless_allowed(tmp_path, capfd,
                                                                          rows):
    base = _parquet(tmp_path / "in", pa.table({"a": pa.array(range(rows), pa.int64())}))
    args = ["ingest", "--input-base", base, "--output", str(tmp_path / "out"), "--splits",
            "train:1000,eval:1", "--quiet"]
    code, _, err = _main(capfd, *args)
    _refused(code, err, (f"['eval'] of {base} (1 file(s), 3 rows) would be empty: after "
                         "hashing into train:1000,eval:1: train got 3, eval got 0") if rows
             else f"['train', 'eval'] of {base} (1 file(s), 0 rows) would be empty: it "
             "holds no rows", "--allow-empty-splits")
    assert not (tmp_path / "out").exists()
    code, out, err = _main(capfd, *args, "--allow-empty-splits", "--json")
    assert code == cli.EXIT_OK, err
    assert json.loads(out.splitlines()[-1])["splits"] == {"train": rows, "eval": 0}


def test_cli_ingest_span_placeholder_names_a_real_pattern(tmp_path, capfd):
    base = _parquet(tmp_path / "in" / "span-1", pa.table({"a": [1]}))
    code, _, err = _main(capfd, "ingest", "--input-base", os.path.dirname(base), "--output",
                         str(tmp_path / "out"), "--pattern", "span-{SPAN}/*.parquet")
    _refused(code, err, "holds {SPAN}", "--pattern 'span-1/*.parquet'")


def test_cli_ingest_missing_input_base_does_not_exist(tmp_path, capfd):
    code, _, err = _main(capfd, "ingest", "--input-base", str(tmp_path / "nope"), "--output",
                         str(tmp_path / "out"))
    _refused(code, err, f"Input base '{tmp_path / 'nope'}' does not exist")


def test_cli_validate_schema_folder_without_schema_named(tmp_path, capfd):
    (tmp_path / "schemas").mkdir()
    code, _, err = _main(capfd, "validate", "--examples", str(tmp_path), "--schema",
                         str(tmp_path / "schemas"), "--output", str(tmp_path / "o"))
    _refused(code, err, "is a folder without schema.pbtxt", "give a schema file")


@pytest.fixture(scope="module")
def mlp_weights(tmp_path_factory):
    torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
    from tfx_bridge.pipelines import demo_models

    path = str(tmp_path_factory.mktemp("w") / "mlp.pt")
    torch.save(demo_models.build("mlp").state_dict(), path)
    return path


MLP = "tfx_bridge.pipelines.demo_models:MLP"


@pytest.mark.parametrize("extra,needles", [
    (["--input", "x:float32:-1,8", "--input", "y:float32:-1,8"],
     ["forward() takes 2 positional arguments but 3 were given", "x:float32:-1,8, y:"]),
    (["--input", "x:float32:-1,8", "--module-kwargs", '{"hidden": 16}'],
     ["does not fit tfx_bridge.pipelines.demo_models:MLP(**{'hidden': 16})",
      "size mismatch for net.0.weight", "Pass the --module-kwargs the weights were trained"]),
])
def test_cli_import_model_inputs_that_do_not_fit_exit_2(tmp_path, capfd, mlp_weights, extra,
                                                         needles):
    code, _, err = _main(capfd, "import-model", "--state-dict", mlp_weights, "--module-class",
                         MLP, "--output-name", "logits", "--output", str(tmp_path / "o"),
                         *extra)
    _refused(code, err, *needles)
    assert "INTERNAL ASSERT" not in err


def test_cli_import_model_too_few_inputs_exit_2(tmp_path, capfd):
    pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
    import torch

    from tfx_bridge.pipelines import demo_models

    path = str(tmp_path / "moe.pt")
    torch.save(demo_models.CtrMoE().state_dict(), path)
    code, _, err = _main(capfd, "import-model", "--state-dict", path, "--module-class",
                         "tfx_bridge.pipelines.demo_models:CtrMoE", "--input",
                         "item_id:int32:-1:0..999", "--output-name", "score", "--output-name",
                         "experts", "--output", str(tmp_path / "o"))
    _refused(code, err, "missing", "Check the declared inputs (item_id:int32:-1:0..999)")
    assert "INTERNAL ASSERT" not in err and "report a bug to PyTorch" not in err


def test_cli_import_model_folder_as_torchscript_named(tmp_path, capfd):
    (tmp_path / "m").mkdir()
    code, _, err = _main(capfd, "import-model", "--torchscript", str(tmp_path / "m"),
                         "--input", "x:float32:-1,8", "--output-name", "y", "--output",
                         str(tmp_path / "o"))
    _refused(code, err, "is a folder; give the model file inside it")


def test_cli_run_without_spans_refused_up_front(tmp_path, capfd):
    (tmp_path / "data").mkdir()
    code, _, err = _main(capfd, "run", "--data-root", str(tmp_path / "data"), "--model-source",
                         str(tmp_path), "--serving-base-path", str(tmp_path / "s"),
                         "--workdir", str(tmp_path / "w"))
    _refused(code, err, "holds no span folders", "span-{SPAN}/*.parquet")
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("extra, needle", [
    (["--model-source", "M", "--trainer-module", "pkg.train.run_fn"],
     "--trainer-module trains in the pipeline; --model-source hands over weights"),
    (["--transform-source", "T"], "--transform-source is for hand-over mode"),
    (["--model-source", "M", "--transform-source", "T"],
     "--transform-source needs --preprocessing-module"),
])
def test_cli_run_mode_options_that_conflict_refused(tmp_path, capfd, extra, needle):
    (tmp_path / "data" / "span-1").mkdir(parents=True)
    code, _, err = _main(capfd, "run", "--data-root", str(tmp_path / "data"),
                         "--serving-base-path", str(tmp_path / "s"),
                         "--workdir", str(tmp_path / "w"),
                         *[str(tmp_path / a) if a in ("M", "T") else a for a in extra])
    _refused(code, err, needle)
    assert not (tmp_path / "w").exists()


def test_cli_run_model_source_research_root_takes_newest_span(tmp_path):
    from tfx_bridge.pipelines import runner

    for span in (1, 2, 10):
        (tmp_path / "research" / f"span-{span}").mkdir(parents=True)
        (tmp_path / "research" / f"span-{span}" / "weights.pt").write_bytes(b"w")
    _parquet(tmp_path / "data" / "span-1", pa.table({"a": [1]}))
    chosen, note = runner.check_run_inputs(str(tmp_path / "data"), str(tmp_path / "research"))
    assert chosen == str(tmp_path / "research" / "span-10") and "newest span" in note


@pytest.mark.parametrize("flag, module, needle", [
    ("--trainer-module", "missing.py", "missing.py: no such file"),
    ("--trainer-module", "nosuchpkg.train.run_fn", "module 'nosuchpkg.train' does not import"),
    ("--preprocessing-module", "broken.py", "does not import: SyntaxError"),
])
def test_cli_run_broken_user_module_refused_before_the_pipeline(tmp_path, capfd, flag,
                                                                module, needle):
    import time

    (tmp_path / "broken.py").write_text("def preprocessing_fn(inputs)\n")
    _parquet(tmp_path / "data" / "span-1", pa.table({"a": [1]}))
    start = time.monotonic()
    code, _, err = _main(capfd, "run", "--data-root", str(tmp_path / "data"),
                         "--serving-base-path", str(tmp_path / "s"), "--workdir",
                         str(tmp_path / "w"), flag,
                         str(tmp_path / module) if module.endswith(".py") else module)
    _refused(code, err, f"{flag} ", needle)
    assert time.monotonic() - start < 20 and not (tmp_path / "s").exists()


@pytest.mark.parametrize("rows", [None, 0])
def test_cli_run_newest_span_without_files_or_rows_refused_by_name(tmp_path, capfd, rows):
    _parquet(tmp_path / "data" / "span-1", pa.table({"a": [1, 2]}))
    newest = tmp_path / "data" / "span-2"
    newest.mkdir()
    if rows is not None:  # a file, with a schema and no rows
        _parquet(newest, pa.table({"a": pa.array([], pa.int64())}))
    code, _, err = _main(capfd, "run", "--data-root", str(tmp_path / "data"),
                         "--serving-base-path", str(tmp_path / "s"),
                         "--workdir", str(tmp_path / "w"))
    _refused(code, err, f"The newest span {'folder ' if rows is None else ''}{newest} holds "
             + ("no file matching '*.parquet'" if rows is None else "0 rows in 1 file(s)"))
    assert not (tmp_path / "s").exists()  # nothing pushed


@pytest.mark.parametrize("args,needle", [
    (["demo", "--spans", "0"], "argument --spans: 0 must be at least 1"),
    (["demo", "--rows", "0"], "argument --rows: 0 must be at least 1"),
    (["push", "--model", "m", "--base-path", "b", "--model-name", "n", "--keep-versions",
      "x"], "argument --keep-versions: 'x' is not a whole number"),
    (["push", "--model", "m", "--base-path", "b", "--model-name", "n",
      "--inter-op-parallelism", "-2"], "argument --inter-op-parallelism: -2: give a count "
     "of threads (at least 1), or -1 to run each call in its calling thread"),
])
def test_cli_usage_errors_exit_2_with_json_line(capfd, args, needle):
    code, out, err = _main(capfd, *args, "--json")
    _refused(code, err, needle)
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary == {"verb": args[0], "ok": False, "exit_code": 2, "error": needle,
                       "error_type": "UsageError"}


def test_cli_push_examples_without_model_features_exit_2(tmp_path, capfd):
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"score": tf.reduce_sum(x, axis=1)}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures={"serving_default": m.serve})
    split = tmp_path / "ex" / "Split-eval"
    split.mkdir(parents=True)
    with tf.io.TFRecordWriter(str(split / "d.gz"), options="GZIP") as w:
        ex = tf.train.Example()
        ex.features.feature["y"].float_list.value.append(1.0)
        w.write(ex.SerializeToString())
    code, _, err = _main(capfd, "push", "--model", str(tmp_path / "sm"), "--base-path",
                         str(tmp_path / "base"), "--model-name", "m", "--examples",
                         str(tmp_path / "ex"))
    _refused(code, err, "lack the model's input(s) ['x'] (their features: ['y'])")
    assert not (tmp_path / "base" / "m" / "1").exists()


def test_local_run_help_is_argparse_not_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "tfx_bridge.kubeflow.local_run", "--help"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "pipeline JSON written by tfx-bridge compile-kfp" in \
        proc.stdout
    proc = subprocess.run([sys.executable, "-m", "tfx_bridge.kubeflow.local_run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_run_gs_serving_base_path_refused_before_the_pipeline(tmp_path, capfd):
    (tmp_path / "data" / "span-1").mkdir(parents=True)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "weights.pt").write_bytes(b"")
    code, _, err = _main(capfd, "run", "--data-root", str(tmp_path / "data"),
                         "--model-source", str(tmp_path / "m"), "--serving-base-path",
                         "gs://bucket/serving", "--workdir", str(tmp_path / "w"))
    _refused(code, err, "Base path gs://bucket/serving", "Push to s3://")
    assert not (tmp_path / "w").exists()  # nothing ran


@pytest.mark.parametrize("flag, needle", [
    ("--state-dict", "holds a RecursiveScriptModule, not a state_dict"),
    ("--onnx", "not an ONNX file (DecodeError). A PyTorch file goes with --torchscript"),
])
def test_cli_import_model_torchscript_under_the_wrong_flag_named_no_output_left(
        tmp_path, capfd, flag, needle):
    torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
    torch.jit.script(torch.nn.Linear(4, 2)).save(str(tmp_path / "m.pt"))
    extra = (["--module-class", "torch.nn:Linear", "--module-kwargs",
              '{"in_features": 4, "out_features": 2}'] if flag == "--state-dict" else [])
    code, _, err = _main(capfd, "import-model", flag, str(tmp_path / "m.pt"), *extra,
                         "--input", "x:float32:-1,4", "--output-name", "y", "--output",
                         str(tmp_path / "out"))
    _refused(code, err, needle)
    assert not (tmp_path / "out").exists()  # a refused first run leaves no folder


@pytest.mark.parametrize("missing", ["--pipeline-root", "--data-root", "--image"])
def test_cli_compile_kfp_without_roots_or_image_refused_no_placeholders(tmp_path, capfd,
                                                                       missing):
    given = {"--pipeline-root": "gs://b/root", "--data-root": "gs://b/data",
             "--image": "r.example/tfx-bridge:1"}
    del given[missing]
    code, _, err = _main(capfd, "compile-kfp", "--output", str(tmp_path / "p.json"),
                         *[x for kv in given.items() for x in kv])
    _refused(code, err, f"the following arguments are required: {missing}")
    assert not (tmp_path / "p.json").exists()


def test_cli_compile_kfp_missing_trainer_module_file_refused_exit_2(tmp_path, capfd):
    code, _, err = _main(capfd, "compile-kfp", "--output", str(tmp_path / "p.json"),
                         "--pipeline-root", "gs://b/root", "--data-root", "gs://b/data",
                         "--image", "r.example/tfx-bridge:1", "--trainer-module",
                         str(tmp_path / "nope.py"))
    _refused(code, err, f"--trainer-module {tmp_path / 'nope.py'}: no such file")


def test_cli_import_model_pickled_whole_module_named_without_torch_advice(tmp_path, capfd):
    torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
    torch.save(torch.nn.Linear(4, 2), str(tmp_path / "m.pt"))  # the module, pickled
    code, _, err = _main(capfd, "import-model", "--state-dict", str(tmp_path / "m.pt"),
                         "--module-class", "torch.nn:Linear", "--module-kwargs",
                         '{"in_features": 4, "out_features": 2}', "--input",
                         "x:float32:-1,4", "--output-name", "y", "--output",
                         str(tmp_path / "out"))
    _refused(code, err, "not a plain state_dict (pickled Python objects (a whole module saved "
             "with torch.save(model)?))", "torch.save(model.state_dict(), path)")
    assert "\x1b[" not in err and "two options" not in err and "weights_only=False" not in err


def test_cli_import_model_more_output_names_than_outputs_says_so(tmp_path, capfd):
    torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
    torch.save(torch.nn.Linear(4, 2).state_dict(), str(tmp_path / "m.pt"))
    code, _, err = _main(capfd, "import-model", "--state-dict", str(tmp_path / "m.pt"),
                         "--module-class", "torch.nn:Linear", "--module-kwargs",
                         '{"in_features": 4, "out_features": 2}', "--input",
                         "x:float32:-1,4", "--output-name", "a", "--output-name", "b",
                         "--output", str(tmp_path / "out"))
    _refused(code, err, "2 output names are declared, but forward() returns 1 output(s)")
    assert "declared inputs" not in err


@pytest.mark.parametrize("extra, needle", [
    (["--model", "NOPE"], "is neither a SavedModel (no saved_model.pb) nor a Model artifact"),
    (["--model", "NOPE", "--candidates", "onnxruntime"], "unknown candidates ['onnxruntime']"),
])
def test_cli_optimize_bad_model_or_candidates_refused_before_the_tensorrt_probe(
        tmp_path, capfd, extra, needle):
    import time

    import tfx_bridge.components.trt_optimizer.optimize  # noqa: F401  (imports are not probes)

    start = time.monotonic()
    code, _, err = _main(capfd, "optimize", *[str(tmp_path / a) if a == "NOPE" else a
                                               for a in extra],
                         "--output", str(tmp_path / "out"))
    _refused(code, err, needle)
    assert time.monotonic() - start < 10 and "TensorRT:" not in err
    assert not (tmp_path / "out").exists()
