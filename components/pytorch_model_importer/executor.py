"""PyTorchModelImporter executor: resolve the source, run the core, record the blessing."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx import version as tfx_version
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from tfx_bridge import fs, properties, schema_file, torch_model
from tfx_bridge.components.pytorch_model_importer import convert, signature
from tfx_bridge.components.pytorch_model_importer.errors import (
    ImporterConfigError,
    ModelSourceError,
    NotEquivalent,
)

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


def resolve_source_path(folder: str, path: str) -> str:
    """``path`` inside the research team's folder, or the one model file there."""
    if path:
        full = fs.join(folder, path) if folder else path
        if not fs.isfile(full):
            raise ModelSourceError(f"No model file {path!r} in {folder or 'the local disk'}.")
        return full
    files = [f for f in fs.listdir(folder) if fs.isfile(fs.join(folder, f))]
    if len(files) != 1:
        raise ImporterConfigError(
            f"{folder} holds {files}; give source_path to say which file is the model.")
    return fs.join(folder, files[0])


def _json(value, default):
    return default if value is None else json.loads(value)


def _uri(input_dict, key: str):
    return artifact_utils.get_single_uri(input_dict[key]) if input_dict.get(key) else None


def source_from_folder(folder: str, exec_properties: Dict[str, Any]):
    """The source, inputs, outputs and module of an import: declared on the component,
    or read from the source model's ``Format-PyTorch/`` spec (PyTorchTrainer's), but
    never both differently."""
    declared_inputs = _json(exec_properties.get(INPUTS_KEY), [])
    declared_outputs = _json(exec_properties.get(OUTPUT_NAMES_KEY), [])
    pytorch = torch_model.folder_of(folder) if folder else ""
    if pytorch and torch_model.has_model(pytorch):
        try:
            spec = torch_model.read_spec(pytorch)
        except torch_model.TorchModelError as e:
            raise ModelSourceError(str(e)) from e
        declared = {"inputs": declared_inputs, "output_names": declared_outputs,
                    "module_class": exec_properties.get(MODULE_CLASS_KEY) or None}
        from_spec = {"inputs": spec.inputs, "output_names": spec.outputs,
                     "module_class": spec.module_class}
        clash = [f"{k}: declared {declared[k]!r}, spec {from_spec[k]!r}"
                 for k in declared if declared[k] and declared[k] != from_spec[k]]
        if clash:
            raise ImporterConfigError(
                f"The source model's spec ({fs.join(pytorch, torch_model.SPEC_FILE)}) and the "
                "component disagree: " + "; ".join(clash) + ". Declare nothing on the "
                "component (the spec is where the model was trained), or fix the run_fn.")
        source = convert.ModelSource(
            convert.SOURCE_STATE_DICT, fs.join(pytorch, spec.weights), spec.module_class,
            spec.module_kwargs)
        return source, spec.inputs, spec.outputs
    if not declared_inputs or not declared_outputs:
        raise ImporterConfigError(
            f"{folder or 'The source'} holds no {torch_model.PYTORCH_DIR}/"
            f"{torch_model.SPEC_FILE}: declare inputs and output_names (and module_class "
            "for a state_dict) on the component.")
    source = convert.ModelSource(
        exec_properties[SOURCE_KIND_KEY],
        resolve_source_path(folder, exec_properties.get(SOURCE_PATH_KEY) or ""),
        exec_properties.get(MODULE_CLASS_KEY) or None,
        _json(exec_properties.get(MODULE_KWARGS_KEY), {}))
    return source, declared_inputs, declared_outputs


class Executor(base_executor.BaseExecutor):
    """Imports a PyTorch/ONNX model into Format-Serving and proves it equivalent."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        folder = _uri(input_dict, SOURCE_MODEL_KEY) or ""
        source, input_texts, output_names = source_from_folder(folder, exec_properties)
        inputs = signature.parse_input_specs(input_texts)
        outputs = signature.check_output_names(output_names)
        schema = None
        if input_dict.get(SCHEMA_KEY):
            schema = schema_file.load_schema(artifact_utils.get_single_uri(input_dict[SCHEMA_KEY]),
                                             ImporterConfigError)
        examples_dir = (artifact_utils.get_single_uri(input_dict[EXAMPLES_KEY])
                        if input_dict.get(EXAMPLES_KEY) else None)
        model = artifact_utils.get_single_instance(output_dict[MODEL_KEY])
        opset = exec_properties.get(OPSET_KEY)
        atol = exec_properties.get(ATOL_KEY)
        rtol = exec_properties.get(RTOL_KEY)
        result = convert.import_model(
            source, inputs, outputs, model.uri,
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
        model.set_string_custom_property(SOURCE_PROPERTY, f"{source.kind}:{source.path}")
        # Recorded only when measured (a model that raised at every batch has none).
        if result.report["max_abs_error"] is not None:
            properties.set_float(model, MAX_ABS_ERROR_PROPERTY, result.report["max_abs_error"])
        model.set_string_custom_property(
            REWRITES_PROPERTY, ",".join(r["kind"] for r in result.report["rewrites"]))
        model.set_string_custom_property(TFX_VERSION_PROPERTY, tfx_version.__version__)
        logging.info("PyTorchModelImporter: blessed=%s, max abs error %s", result.blessed,
                     result.report["max_abs_error"])
        if not result.blessed and exec_properties.get(FAIL_ON_NOT_EQUIVALENT_KEY, 1):
            raise NotEquivalent(
                f"The converted SavedModel is not equivalent to {source.path} (report: "
                f"{os.path.join(model.uri, convert.REPORT_MD)}):\n"
                + convert.check_table([c for c in result.report["checks"] if not c["ok"]]))
