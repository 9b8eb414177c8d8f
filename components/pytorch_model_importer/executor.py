"""PyTorchModelImporter executor: resolve the source, run the core, record the blessing."""
from __future__ import annotations

import json
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx import version as tfx_version
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from tfx_bridge.artifacts import properties, schema_file
from tfx_bridge.components.pytorch_model_importer import convert, report, signature, source
from tfx_bridge.components.pytorch_model_importer.errors import (
    NotEquivalent,
)
from tfx_bridge.storage import fs

SOURCE_MODEL_KEY = "source_model"
SCHEMA_KEY = "schema"
EXAMPLES_KEY = "examples"
TRANSFORM_GRAPH_KEY = "transform_graph"
TRANSFORMED_EXAMPLES_KEY = "transformed_examples"
MODEL_KEY = "model"
SOURCE_KIND_KEY = "source_kind"
SOURCE_PATH_KEY = "source_path"
MODULE_CLASS_KEY = "module_class"
MODULE_KWARGS_KEY = "module_kwargs"
INPUTS_KEY = "inputs"
OUTPUT_NAMES_KEY = "output_names"
OPSET_KEY = "opset"
ATOL_KEY = "atol"
RTOL_KEY = "rtol"
FAIL_ON_NOT_EQUIVALENT_KEY = "fail_on_not_equivalent"
CONVERTER_KEY = "converter"
# Custom properties on the Model artifact (docs/ARCHITECTURE.md).
BLESSED_PROPERTY = properties.BLESSED
SOURCE_PROPERTY = "source"
MAX_ABS_ERROR_PROPERTY = properties.MAX_ABS_ERROR
REWRITES_PROPERTY = properties.REWRITES
CONVERTER_PROPERTY = "converter"
TFX_VERSION_PROPERTY = artifact_utils.ARTIFACT_TFX_VERSION_CUSTOM_PROPERTY_KEY


def _json(value, default):
    return default if value is None else json.loads(value)


def _uri(input_dict, key: str):
    return artifact_utils.get_single_uri(input_dict[key]) if input_dict.get(key) else None


def source_from_folder(folder: str, exec_properties: Dict[str, Any]):
    """The component's declared source, or the one in the source model's folder."""
    return source.from_model_folder(
        folder, _json(exec_properties.get(INPUTS_KEY), []),
        _json(exec_properties.get(OUTPUT_NAMES_KEY), []),
        exec_properties.get(MODULE_CLASS_KEY) or None, exec_properties[SOURCE_KIND_KEY],
        exec_properties.get(SOURCE_PATH_KEY) or "",
        _json(exec_properties.get(MODULE_KWARGS_KEY), {}))


class Executor(base_executor.BaseExecutor):
    """Imports a PyTorch/ONNX model into Format-Serving and proves it equivalent."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        folder = _uri(input_dict, SOURCE_MODEL_KEY) or ""
        model_source, input_texts, output_names = source_from_folder(folder, exec_properties)
        inputs = signature.parse_input_specs(input_texts)
        outputs = signature.check_output_names(output_names)
        schema = None
        if input_dict.get(SCHEMA_KEY):
            schema = schema_file.load_schema(artifact_utils.get_single_uri(input_dict[SCHEMA_KEY]))
        examples_dir = (artifact_utils.get_single_uri(input_dict[EXAMPLES_KEY])
                        if input_dict.get(EXAMPLES_KEY) else None)
        model = artifact_utils.get_single_instance(output_dict[MODEL_KEY])
        opset = exec_properties.get(OPSET_KEY)
        atol = exec_properties.get(ATOL_KEY)
        rtol = exec_properties.get(RTOL_KEY)
        result = convert.import_model(
            model_source, inputs, outputs, model.uri,
            opset=convert.DEFAULT_OPSET if opset is None else int(opset),
            atol=convert.DEFAULT_ATOL if atol is None else float(atol),
            rtol=0.0 if rtol is None else float(rtol),
            examples_dir=examples_dir, schema=schema,
            transform_dir=_uri(input_dict, TRANSFORM_GRAPH_KEY),
            transformed_examples_dir=_uri(input_dict, TRANSFORMED_EXAMPLES_KEY),
            converter=exec_properties.get(CONVERTER_KEY) or convert.DEFAULT_CONVERTER)
        # Written by the core (the CLI writes the same): Format-PyTorch/ and the digest.
        model.set_string_custom_property(properties.SOURCE_DIGEST,
                                         result.report["source_digest"])
        model.set_string_custom_property(CONVERTER_PROPERTY, result.report["converter"])
        model.set_int_custom_property(BLESSED_PROPERTY, 1 if result.blessed else 0)
        model.set_string_custom_property(SOURCE_PROPERTY,
                                         f"{model_source.kind}:{model_source.path}")
        # Recorded only when measured (a model that raised at every batch has none).
        if result.report["max_abs_error"] is not None:
            properties.set_float(model, MAX_ABS_ERROR_PROPERTY, result.report["max_abs_error"])
        model.set_string_custom_property(
            REWRITES_PROPERTY, ",".join(r["kind"] for r in result.report["rewrites"]))
        model.set_string_custom_property(TFX_VERSION_PROPERTY, tfx_version.__version__)
        logging.info("PyTorchModelImporter: blessed=%s, max abs error %s", result.blessed,
                     result.report["max_abs_error"])
        if not result.blessed and exec_properties.get(FAIL_ON_NOT_EQUIVALENT_KEY, 1):
            cause = report.likely_cause(result.report)
            raise NotEquivalent(
                f"The converted SavedModel is not equivalent to {model_source.path} (report: "
                f"{fs.join(model.uri, convert.REPORT_MD)}):\n"
                + convert.check_table([c for c in result.report["checks"] if not c["ok"]])
                + (f"\nLikely cause: {cause}" if cause else ""))
