"""TrtOptimizer executor: unpack artifacts, run the core, record backend and blessing."""
from __future__ import annotations

import json
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
from tfx_bridge.components.trt_optimizer.errors import Drifted
from tfx_bridge.storage import fs
from tfx_bridge.torch import model as torch_model

MODEL_KEY = "model"
EXAMPLES_KEY = "examples"
OPTIMIZED_MODEL_KEY = "optimized_model"
PRECISION_KEY = "precision"
ATOL_KEY = "atol"
RTOL_KEY = "rtol"
TOPK_THRESHOLD_KEY = "topk_threshold"
ITERATIONS_KEY = "iterations"
OP_DENYLIST_KEY = "op_denylist"
WORKSPACE_BYTES_KEY = "workspace_bytes"
MINIMUM_SEGMENT_SIZE_KEY = "minimum_segment_size"
MAXIMUM_CACHED_ENGINES_KEY = "maximum_cached_engines"
FAIL_ON_DRIFT_KEY = "fail_on_drift"
CANDIDATES_KEY = "candidates"
# Custom properties on the optimized Model (docs/ARCHITECTURE.md).
BLESSED_PROPERTY = properties.BLESSED
BACKEND_PROPERTY = "backend"
PRECISION_PROPERTY = "precision"
REQUIRES_GPU_PROPERTY = properties.REQUIRES_GPU
SERVING_FLAGS_PROPERTY = properties.SERVING_FLAGS
LATENCY_BEFORE_PROPERTY = properties.LATENCY_BEFORE
LATENCY_AFTER_PROPERTY = properties.LATENCY_AFTER


def _get(props, key, default):
    value = props.get(key)
    return default if value is None else value


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
        p = exec_properties
        result = optimize.optimize(
            source, out.uri, precision=_get(p, PRECISION_KEY, "fp32"), examples_dir=examples,
            atol=float(_get(p, ATOL_KEY, optimize.DEFAULT_ATOL)),
            rtol=float(_get(p, RTOL_KEY, 0.0)),
            topk_threshold=float(_get(p, TOPK_THRESHOLD_KEY, 1.0)),
            iterations=int(_get(p, ITERATIONS_KEY, optimize.DEFAULT_ITERATIONS)),
            op_denylist=json.loads(_get(p, OP_DENYLIST_KEY,
                                        json.dumps(optimize.DEFAULT_OP_DENYLIST))),
            trt_options={"workspace_bytes": int(_get(p, WORKSPACE_BYTES_KEY, 1 << 30)),
                         "minimum_segment_size": int(_get(p, MINIMUM_SEGMENT_SIZE_KEY, 3)),
                         "maximum_cached_engines": int(_get(p, MAXIMUM_CACHED_ENGINES_KEY, 1))},
            candidates=json.loads(p[CANDIDATES_KEY]) if p.get(CANDIDATES_KEY) else None)
        report = result.report
        # The PyTorch form travels with the model (docs/ARCHITECTURE.md): once this
        # artifact is blessed, the next training warm-starts from it.
        pytorch = torch_model.folder_of(model.uri)
        if torch_model.has_model(pytorch):
            fs.copy_tree(pytorch, torch_model.folder_of(out.uri))
        out.set_int_custom_property(BLESSED_PROPERTY, 1 if result.blessed else 0)
        out.set_string_custom_property(BACKEND_PROPERTY, result.backend)
        out.set_string_custom_property(PRECISION_PROPERTY, result.precision)
        out.set_int_custom_property(REQUIRES_GPU_PROPERTY, 1 if result.requires_gpu else 0)
        out.set_string_custom_property(SERVING_FLAGS_PROPERTY, " ".join(result.serving_flags))
        largest = f"p50_ms_batch_{max(report['batches'])}"
        properties.set_float(out, LATENCY_BEFORE_PROPERTY, report["latency_before_ms"][largest])
        properties.set_float(out, LATENCY_AFTER_PROPERTY, report["latency_after_ms"][largest])
        out.set_string_custom_property(artifact_utils.ARTIFACT_TFX_VERSION_CUSTOM_PROPERTY_KEY,
                                       tfx_version.__version__)
        logging.info("TrtOptimizer: backend %s, blessed %s", result.backend, result.blessed)
        if not result.blessed and _get(p, FAIL_ON_DRIFT_KEY, 1):
            raise Drifted(
                f"The {result.backend} model drifted from the original (report: "
                f"{os.path.join(out.uri, optimize.REPORT_MD)}).")
