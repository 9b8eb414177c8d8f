"""ServingPusher executor: gather blessings, run the core, record the PushedModel."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import path_utils

from tfx_bridge.artifacts.model_facts import ModelFacts, model_facts
from tfx_bridge.components.serving_pusher import serving
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
    REPORT_FILE,
    SCHEMA_GUARD_KEY,
)
from tfx_bridge.storage import fs


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


def _blessed(artifacts: Optional[List[types.Artifact]]) -> Optional[int]:
    """``blessed`` of a supplied gate artifact; 0 when it carries none (fail closed)."""
    if not artifacts:
        return None
    return int(_prop(artifacts[0], BLESSED_PROPERTY, 0) or 0)


def _gate(artifact: types.Artifact, facts: ModelFacts, required: bool) -> Optional[int]:
    """A Model folder's verdict: its report's ``blessed`` and any ``blessed`` property
    set on the artifact, either one at 0 failing it; None (no gate) when it has
    neither, or 0 then when ``required``."""
    verdicts = [] if facts.blessed is None else [int(facts.blessed)]
    if _prop(artifact, BLESSED_PROPERTY, None) is not None:
        verdicts.append(_blessed([artifact]))
    if not verdicts:
        return 0 if required else None
    return min(verdicts)


class Executor(base_executor.BaseExecutor):
    """Pushes only when every supplied gate is blessed; records why not otherwise."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        config = PusherConfig.from_json(exec_properties[CONFIG_KEY])
        model = artifact_utils.get_single_instance(input_dict[MODEL_KEY])
        pushed = artifact_utils.get_single_instance(output_dict[PUSHED_MODEL_KEY])
        # The Model folders' own reports, read as `tfx-bridge push` reads them. A
        # `blessed` property set on the Model by anything else (an Importer, another
        # component) gates too: either one at 0 stops the push. The other gates are
        # TFX's and SchemaGuard's artifacts (their blessed property).
        facts = model_facts(model.uri)
        imported = input_dict.get(IMPORTED_MODEL_KEY)
        imported_facts = model_facts(imported[0].uri) if imported else None
        blessings = {
            serving.MODEL_GATE: _gate(model, facts, required=False),
            # Supplied to gate the push: no verdict at all fails closed.
            "the importer (equivalence)": (_gate(imported[0], imported_facts, required=True)
                                           if imported else None),
            "SchemaGuard": _blessed(input_dict.get(SCHEMA_GUARD_KEY)),
            "Evaluator (ModelBlessing)": _blessed(input_dict.get(MODEL_BLESSING_KEY)),
            "InfraValidator (InfraBlessing)": _blessed(input_dict.get(INFRA_BLESSING_KEY)),
        }
        blessings = {k: v for k, v in blessings.items() if v is not None}
        flags = list(facts.serving_flags)
        examples = (artifact_utils.get_single_uri(input_dict[EXAMPLES_KEY])
                    if input_dict.get(EXAMPLES_KEY) else None)
        identity = None
        source = imported_facts.source_digest if imported_facts else None
        if source:
            # Two optimizer runs over the same sources may keep different (drift-checked,
            # equivalent) candidates; only what the server must be told changes the model.
            identity = f"source:{source} flags:{' '.join(flags)}"
        result = serving.push(
            path_utils.serving_model_path(model.uri, path_utils.is_old_model_artifact(model)),
            config, requires_gpu=facts.requires_gpu, serving_flags=flags,
            examples_dir=examples, blessings=blessings, identity=identity)
        pushed.set_int_custom_property(PUSHED_PROPERTY, 1 if result.pushed else 0)
        pushed.set_string_custom_property(REASON_PROPERTY, result.reason)
        if result.pushed:
            pushed.set_string_custom_property(PUSHED_DESTINATION_PROPERTY, result.destination)
            pushed.set_string_custom_property(PUSHED_VERSION_PROPERTY, str(result.version))
        fs.write_text(fs.join(pushed.uri, REPORT_FILE), json.dumps(
            {"pushed": result.pushed, "version": result.version,
             "destination": result.destination, "reason": result.reason,
             "blessings": blessings, **result.details}, indent=2, default=str))
        logging.info("ServingPusher: %s", result.reason)
