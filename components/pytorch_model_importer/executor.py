"""PyTorchModelImporter executor: resolve the source, run the core, record the blessing."""
from __future__ import annotations

from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx import version as tfx_version
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from tfx_bridge.artifacts import properties, schema_file
from tfx_bridge.components.pytorch_model_importer import convert, report
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
from tfx_bridge.components.pytorch_model_importer.errors import NotEquivalent
from tfx_bridge.components.pytorch_model_importer.spec import (
    BLESSED_PROPERTY,
    CONFIG_KEY,
    CONVERTER_PROPERTY,
    EXAMPLES_KEY,
    MAX_ABS_ERROR_PROPERTY,
    MODEL_KEY,
    REWRITES_PROPERTY,
    SCHEMA_KEY,
    SOURCE_MODEL_KEY,
    SOURCE_PROPERTY,
    TFX_VERSION_PROPERTY,
    TRANSFORM_GRAPH_KEY,
    TRANSFORMED_EXAMPLES_KEY,
)
from tfx_bridge.storage import fs


def _uri(input_dict, key: str):
    return artifact_utils.get_single_uri(input_dict[key]) if input_dict.get(key) else None


class Executor(base_executor.BaseExecutor):
    """Imports a PyTorch/ONNX model into Format-Serving and proves it equivalent."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        config = ImporterConfig.from_json(exec_properties[CONFIG_KEY])
        schema = None
        if input_dict.get(SCHEMA_KEY):
            schema = schema_file.load_schema(artifact_utils.get_single_uri(input_dict[SCHEMA_KEY]))
        model = artifact_utils.get_single_instance(output_dict[MODEL_KEY])
        result = convert.import_model(
            config, model.uri, source_model=_uri(input_dict, SOURCE_MODEL_KEY) or "",
            examples_dir=_uri(input_dict, EXAMPLES_KEY), schema=schema,
            transform_dir=_uri(input_dict, TRANSFORM_GRAPH_KEY),
            transformed_examples_dir=_uri(input_dict, TRANSFORMED_EXAMPLES_KEY))
        model_source = result.source
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
        if not result.blessed and config.fail_on_not_equivalent:
            cause = report.likely_cause(result.report)
            raise NotEquivalent(
                f"The converted SavedModel is not equivalent to {model_source.path} (report: "
                f"{fs.join(model.uri, convert.REPORT_MD)}):\n"
                + report.check_table([c for c in result.report["checks"] if not c["ok"]])
                + (f"\nLikely cause: {cause}" if cause else ""))
