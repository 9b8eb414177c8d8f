"""Compile the tfx-bridge pipeline for Kubeflow Pipelines (KubeflowV2DagRunner).

    tfx-bridge compile-kfp --output pipeline.json \\
        --pipeline-root gs://bucket/tfx-bridge --data-root gs://bucket/clicks \\
        --model-source gs://bucket/research/ctr/latest --serving-base-path /models \\
        --image gcr.io/my-project/tfx-bridge:0.1.0

Every task runs ``python -m tfx.orchestration.kubeflow.v2.container.
kubeflow_v2_run_executor --executor_class_path tfx_bridge.components...`` in
the image built from kubeflow/Dockerfile; ParquetExampleGen's span
resolution runs the stock file-based driver as the task's preCacheCheck.
"""
from __future__ import annotations

import os
from typing import List, Optional

DEFAULT_IMAGE = "tfx-bridge:0.1.0"
PIPELINE_NAME = "tfx-bridge"


def compile_pipeline(output: str, pipeline_root: str, data_root: str, model_source: str,
                     serving_base_path: str, image: str = DEFAULT_IMAGE,
                     contract_path: Optional[str] = None, schema_path: Optional[str] = None,
                     beam_pipeline_args: Optional[List[str]] = None) -> str:
    """Writes the PipelineJob JSON (or a PipelineSpec when ``output`` ends in .yaml)."""
    try:
        from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
    except ImportError as e:
        from tfx_bridge.errors import BridgeError
        raise BridgeError(f"Kubeflow compile needs kfp ({e}): pip install 'tfx-bridge[kfp]' "
                          "-c constraints.txt") from e

    from tfx_bridge.pipelines import pipeline

    p = pipeline.create_pipeline(
        PIPELINE_NAME, pipeline_root, data_root, model_source, serving_base_path,
        schema_path=schema_path, contract_path=contract_path,
        beam_pipeline_args=beam_pipeline_args)
    config = kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image=image)
    folder = os.path.dirname(os.path.abspath(output))
    os.makedirs(folder, exist_ok=True)
    kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=config, output_dir=folder, output_filename=os.path.basename(output)).run(p)
    return os.path.abspath(output)
