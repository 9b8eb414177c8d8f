"""TrtOptimizer executor: unpack artifacts, run the core (which writes the whole
artifact), record backend and blessing."""
from __future__ import annotations

import os
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx import version as tfx_version
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import path_utils

from tfx_bridge.artifacts import properties
from tfx_bridge.components.trt_optimizer import optimize
from tfx_bridge.components.trt_optimizer.config import OptimizerConfig
from tfx_bridge.components.trt_optimizer.errors import Drifted
from tfx_bridge.components.trt_optimizer.results import REPORT_MD
from tfx_bridge.components.trt_optimizer.spec import (
    BACKEND_PROPERTY,
    BLESSED_PROPERTY,
    CONFIG_KEY,
    DECISION_PROPERTY,
    EXAMPLES_KEY,
    LATENCY_AFTER_PROPERTY,
    LATENCY_BEFORE_PROPERTY,
    MODEL_KEY,
    OPTIMIZED_MODEL_KEY,
    PRECISION_PROPERTY,
    REQUIRES_GPU_PROPERTY,
    SERVING_FLAGS_PROPERTY,
)


class Executor(base_executor.BaseExecutor):
    """Optimizes the imported SavedModel (TF-TRT, or the measured CPU path)."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        model = artifact_utils.get_single_instance(input_dict[MODEL_KEY])
        source = path_utils.serving_model_path(model.uri, path_utils.is_old_model_artifact(model))
        examples = (artifact_utils.get_single_uri(input_dict[EXAMPLES_KEY])
                    if input_dict.get(EXAMPLES_KEY) else None)
        out = artifact_utils.get_single_instance(output_dict[OPTIMIZED_MODEL_KEY])
        config = OptimizerConfig.from_json(exec_properties[CONFIG_KEY])
        result = optimize.optimize(source, out.uri, config, examples_dir=examples,
                                   model_dir=model.uri)
        report = result.report
        out.set_int_custom_property(BLESSED_PROPERTY, 1 if result.blessed else 0)
        out.set_string_custom_property(BACKEND_PROPERTY, result.backend)
        out.set_string_custom_property(PRECISION_PROPERTY, result.precision)
        out.set_int_custom_property(REQUIRES_GPU_PROPERTY, 1 if result.requires_gpu else 0)
        out.set_string_custom_property(SERVING_FLAGS_PROPERTY, " ".join(result.serving_flags))
        largest = f"p50_ms_batch_{max(report['batches'])}"
        properties.set_float(out, LATENCY_BEFORE_PROPERTY, report["latency_before_ms"][largest])
        properties.set_float(out, LATENCY_AFTER_PROPERTY, report["latency_after_ms"][largest])
        out.set_string_custom_property(DECISION_PROPERTY, report["decision"]["reason"])
        out.set_string_custom_property(artifact_utils.ARTIFACT_TFX_VERSION_CUSTOM_PROPERTY_KEY,
                                       tfx_version.__version__)
        logging.info("TrtOptimizer: backend %s, blessed %s; %s", result.backend, result.blessed,
                     report["decision"]["reason"])
        if not result.blessed and config.fail_on_drift:
            raise Drifted(
                f"The {result.backend} model drifted from the original (report: "
                f"{os.path.join(out.uri, REPORT_MD)}).")
