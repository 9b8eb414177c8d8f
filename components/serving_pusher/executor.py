"""ServingPusher executor: maps the artifacts to folders and verdicts, runs the core
(:func:`serving.push_model`, as ``tfx-bridge push`` does), records the PushedModel."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import path_utils

from tfx_bridge.components.serving_pusher import gates, serving
from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.spec import (
    BLESSED_PROPERTY,
    CONFIG_KEY,
    EXAMPLES_KEY,
    IMPORTED_MODEL_KEY,
    INFRA_BLESSING_KEY,
    MODEL_BLESSING_KEY,
    MODEL_KEY,
    PUSHED_DESTINATION_PROPERTY,
    PUSHED_MODEL_KEY,
    PUSHED_PROPERTY,
    PUSHED_VERSION_PROPERTY,
    REASON_PROPERTY,
    SCHEMA_GUARD_KEY,
)


def _prop(artifact: types.Artifact, key: str, default):
    """A custom property whatever its stored kind: artifacts that crossed Kubeflow's
    JSON metadata carry values as structs (numbers as doubles), local ones as ints."""
    if key not in artifact.mlmd_artifact.custom_properties:
        return default
    value = artifact.mlmd_artifact.custom_properties[key]
    kind = value.WhichOneof("value")
    if kind in ("struct_value", "proto_value"):
        return artifact.get_custom_property(key)  # TFX decodes its own encodings
    return getattr(value, kind) if kind else default


def _mark(artifact: types.Artifact) -> Optional[int]:
    """``blessed`` set on the artifact, or None when it carries none."""
    if _prop(artifact, BLESSED_PROPERTY, None) is None:
        return None
    return int(_prop(artifact, BLESSED_PROPERTY, 0) or 0)


def _blessed(artifacts: Optional[List[types.Artifact]]) -> Optional[int]:
    """``blessed`` of a supplied gate artifact; 0 when it carries none (fail closed)."""
    if not artifacts:
        return None
    return _mark(artifacts[0]) or 0


class Executor(base_executor.BaseExecutor):
    """Pushes only when every supplied gate is blessed; records why not otherwise."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        config = PusherConfig.from_json(exec_properties[CONFIG_KEY])
        model = artifact_utils.get_single_instance(input_dict[MODEL_KEY])
        pushed = artifact_utils.get_single_instance(output_dict[PUSHED_MODEL_KEY])
        imported = input_dict.get(IMPORTED_MODEL_KEY)
        result = serving.push_model(
            config, model.uri,
            saved_model_dir=path_utils.serving_model_path(
                model.uri, path_utils.is_old_model_artifact(model)),
            imported_model_dir=imported[0].uri if imported else None,
            mark=_mark(model), imported_mark=_mark(imported[0]) if imported else None,
            other_gates={
                gates.SCHEMA_GUARD_GATE: _blessed(input_dict.get(SCHEMA_GUARD_KEY)),
                gates.EVALUATOR_GATE: _blessed(input_dict.get(MODEL_BLESSING_KEY)),
                gates.INFRA_GATE: _blessed(input_dict.get(INFRA_BLESSING_KEY)),
            },
            examples_dir=(artifact_utils.get_single_uri(input_dict[EXAMPLES_KEY])
                          if input_dict.get(EXAMPLES_KEY) else None),
            report_dir=pushed.uri)
        pushed.set_int_custom_property(PUSHED_PROPERTY, 1 if result.pushed else 0)
        pushed.set_string_custom_property(REASON_PROPERTY, result.reason)
        if result.pushed:
            pushed.set_string_custom_property(PUSHED_DESTINATION_PROPERTY, result.destination)
            pushed.set_string_custom_property(PUSHED_VERSION_PROPERTY, str(result.version))
        logging.info("ServingPusher: %s", result.reason)
