"""Compile the tfx-bridge pipeline for Kubeflow Pipelines (KubeflowV2DagRunner).

    tfx-bridge compile-kfp --output pipeline.json \\
        --pipeline-root gs://bucket/tfx-bridge --data-root gs://bucket/clicks \\
        --model-source gs://bucket/research/ctr/latest --serving-base-path /models \\
        --image gcr.io/my-project/tfx-bridge:0.1.0

Every task runs ``python -m tfx_bridge.kubeflow.entrypoint
tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor
--executor_class_path ...`` in the image built from kubeflow/Dockerfile;
ParquetExampleGen's span resolution runs the stock file-based driver as the
task's preCacheCheck, through the same entrypoint. The entrypoint makes
``s3://`` pipeline roots work for stock components (tensorflow-io registered,
a clean exit: see :mod:`tfx_bridge.kubeflow.entrypoint`).
"""
from __future__ import annotations

import os
from typing import List, Optional

from tfx_bridge.pipelines.config import PipelineConfig

DEFAULT_IMAGE = "tfx-bridge:0.1.0"
# Where kubeflow/Dockerfile puts schemas/ inside the component image.
IMAGE_SCHEMAS = "/tfx-bridge/schemas/"
PIPELINE_NAME = "tfx-bridge"
ENTRYPOINT = ["python", "-m", "tfx_bridge.kubeflow.entrypoint"]
EXECUTOR_MODULE = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"


def compile_pipeline(output: str, pipeline_root: str, data_root: str,
                     model_source: Optional[str],
                     serving_base_path: str, config: Optional[PipelineConfig] = None,
                     image: str = DEFAULT_IMAGE,
                     contract_path: Optional[str] = None, schema_path: Optional[str] = None,
                     beam_pipeline_args: Optional[List[str]] = None,
                     transform_source: Optional[str] = None, beam_runner=None) -> str:
    """Writes the PipelineJob JSON (or a PipelineSpec when ``output`` ends in .yaml).

    ``config`` is the run's :class:`PipelineConfig` (default: its defaults;
    e.g. ``PipelineConfig(evaluate=False, optimizer_iterations=20)``), given to
    :func:`tfx_bridge.pipelines.pipeline.create_pipeline` with
    ``transform_source`` and ``beam_runner``; without ``model_source`` the
    pipeline trains (Transform + PyTorchTrainer, the demo's modules unless the
    config names its own).
    A module *file* (``.py``) is packaged by TFX into a wheel under
    ``<pipeline_root>/_wheels/`` now, which the tasks install: on an ``s3://``
    root this process registers tensorflow-io to write it (the CLI exits cleanly
    afterwards; see :mod:`tfx_bridge.storage.objectstore`).
    """
    try:
        from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
    except ImportError as e:
        from tfx_bridge.errors import BridgeError
        raise BridgeError(f"Kubeflow compile needs kfp ({e}): pip install 'tfx-bridge[kfp]' "
                          "-c constraints.txt") from e

    from tfx_bridge import beam as beam_options
    from tfx_bridge.pipelines import pipeline
    from tfx_bridge.storage import objectstore

    config = pipeline.with_demo_modules(config or PipelineConfig(), model_source)
    module_files = [m for m in (config.preprocessing_module, config.trainer_module)
                    if m and m.endswith(".py")]
    if module_files and objectstore.uses_s3([pipeline_root]):
        objectstore.enable_tfio()  # TFX writes the user-code wheel with tf.io.gfile

    # Beam's s3 options (endpoint, region from the AWS variables) for s3:// paths;
    # credentials stay in the tasks' environment.
    beam = beam_options.object_store_args(
        [p for p in (pipeline_root, data_root, model_source, serving_base_path) if p],
        beam_pipeline_args)
    p = pipeline.create_pipeline(
        PIPELINE_NAME, pipeline_root, data_root, model_source, serving_base_path, config,
        schema_path=schema_path, contract_path=contract_path,
        beam_pipeline_args=beam or None, transform_source=transform_source,
        beam_runner=beam_runner, content_identity=False)
    config = kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
        default_image=image, default_commands=[*ENTRYPOINT, EXECUTOR_MODULE])
    folder = os.path.dirname(os.path.abspath(output))
    os.makedirs(folder, exist_ok=True)
    kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=config, output_dir=folder, output_filename=os.path.basename(output)).run(p)
    _driver_through_entrypoint(os.path.abspath(output))
    return os.path.abspath(output)


def _driver_through_entrypoint(path: str) -> None:
    """Runs ExampleGen's preCacheCheck (a fixed ``python -m <driver>`` command in
    TFX) through the entrypoint too: it lists the data root, which may be s3://."""
    import json

    import yaml

    yaml_out = path.endswith((".yaml", ".yml"))
    with open(path) as f:
        job = yaml.safe_load(f) if yaml_out else json.load(f)
    spec = job.get("pipelineSpec", job)
    for executor in spec["deploymentSpec"]["executors"].values():
        hook = executor.get("container", {}).get("lifecycle", {}).get("preCacheCheck")
        if hook and hook["command"][:2] == ["python", "-m"]:
            hook["command"] = [*ENTRYPOINT, *hook["command"][2:]]
    with open(path, "w") as f:
        if yaml_out:
            yaml.safe_dump(job, f, sort_keys=False)
        else:
            json.dump(job, f, indent=2, sort_keys=True)
