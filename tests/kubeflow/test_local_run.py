"""The compiled Kubeflow spec, executed task by task under the Kubeflow entrypoints."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge import schemas  # noqa: E402
from tfx_bridge.kubeflow import compile as kfp_compile  # noqa: E402
from tfx_bridge.kubeflow import local_run  # noqa: E402
from tfx_bridge.pipelines import demo_data, demo_preprocessing, demo_trainer  # noqa: E402
from tfx_bridge.storage import fs  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402

USER_TRAINER = '''"""A user's trainer module file: TFX packages it into a wheel at compile time."""
from tfx_bridge.pipelines import demo_trainer


def run_fn(fn_args):
    fn_args.custom_config = {**(fn_args.custom_config or {}), "seed": 5}
    demo_trainer.run_fn(fn_args)
'''


@pytest.mark.slow
def test_compiled_spec_trains_under_kubeflow_entrypoints_on_s3(tmp_path, s3_bucket,
                                                               cli_in_child):
    """As on Kubeflow with MinIO: pipeline root, data and serving base path on s3://,
    compiled by `tfx-bridge compile-kfp --json` (one result line, then the JSON
    line; no temp folder left), every task a separate process under the compiled
    command (the entrypoint registers s3 for stock components and exits cleanly).
    Transform runs the demo preprocessing_fn; PyTorchTrainer runs a user's module
    *file*, which TFX packaged into a wheel under the pipeline root at compile time
    and the task installs. The Evaluator is left out to keep the suite's time (the
    lifecycle test gates with it)."""
    data = fs.join(s3_bucket, "data")
    demo_data.write_demo_spans(data, spans=[1, 2], rows_per_span=300, files_per_span=1)
    root, serving = fs.join(s3_bucket, "root"), fs.join(s3_bucket, "serving")
    module = tmp_path / "ctr_trainer.py"
    module.write_text(USER_TRAINER)
    spec = str(tmp_path / "pipeline.json")
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = cli_in_child("compile-kfp", "--output", spec, "--pipeline-root", root,
                        "--data-root", data, "--serving-base-path", serving,
                        "--schema", schemas.path(schemas.DEMO_SCHEMA),
                        "--contract", schemas.path(schemas.DEMO_CONTRACT),
                        "--trainer-module", str(module), "--train-steps", "30",
                        "--no-evaluate", "--optimizer-iterations", "10",
                        "--image", kfp_compile.DEFAULT_IMAGE, "--json",
                        env={**os.environ, "TMPDIR": str(temp)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    # TFX built the module file's wheel with `setup.py bdist_wheel`: that tool's output
    # went to stderr, never before --json's line, and its build folders left with the verb.
    lines = proc.stdout.splitlines()
    assert lines[0] == f"Wrote {spec}" and len(lines) == 2, proc.stdout[:2000]
    assert json.loads(lines[1])["ok"] is True
    assert os.listdir(temp) == []
    job = json.loads(open(spec).read())
    executors = job["pipelineSpec"]["deploymentSpec"]["executors"]
    gen = executors["ParquetExampleGen_executor"]["container"]
    assert gen["command"] == [*kfp_compile.ENTRYPOINT, kfp_compile.EXECUTOR_MODULE]
    assert gen["lifecycle"]["preCacheCheck"]["command"] == [
        *kfp_compile.ENTRYPOINT, "tfx.orchestration.kubeflow.v2.file_based_example_gen.driver"]
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    assert {"Transform", "PyTorchTrainer"} <= set(tasks)
    trainer_params = json.dumps(tasks["PyTorchTrainer"]["inputs"]["parameters"])
    assert f"ctr_trainer@{root}/_wheels/" in trainer_params
    wheels = fs.glob(fs.join(root, "_wheels", "*.whl"))
    assert len(wheels) == 1

    outputs = local_run.run_compiled(spec, str(tmp_path / "kfp"))
    examples = outputs["ParquetExampleGen"]["examples"][0]
    assert examples["uri"].startswith(root + "/")
    # The stock driver resolved {SPAN}; span is a declared Examples property too,
    # so the custom one travels as "custom:span".
    assert examples["metadata"]["custom:span"] == 2
    assert outputs["SchemaGuard"]["anomalies"][0]["metadata"]["blessed"] == 1
    graph = outputs["Transform"]["transform_graph"][0]["uri"]
    assert fs.isdir(fs.join(graph, "transform_fn", "assets"))
    trained = outputs["PyTorchTrainer"]["model"][0]
    assert trained["metadata"]["retrained"] == 1
    folder = torch_model.folder_of(trained["uri"])
    assert torch_model.read_spec(folder).module_class == demo_trainer.MODULE_CLASS
    imported = outputs["PyTorchModelImporter"]["model"][0]["metadata"]
    assert imported["blessed"] == 1
    pushed = outputs["ServingPusher"]["pushed_model"][0]["metadata"]
    assert pushed["pushed"] == 1, json.dumps(pushed)
    assert pushed["pushed_destination"] == fs.join(serving, "ctr", "1")
    assert fs.isfile(fs.join(pushed["pushed_destination"], "saved_model.pb"))
    assert fs.isfile(fs.join(pushed["pushed_destination"], "assets",
                             demo_preprocessing.COUNTRY_VOCABULARY))
    assert fs.isfile(fs.join(serving, "models.config"))
