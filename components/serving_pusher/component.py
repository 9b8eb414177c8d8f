"""ServingPusher: the TFX component (spec, class, build-time checks)."""
from __future__ import annotations

import json
from typing import Optional

from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel, component_spec, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_bridge.components.serving_pusher import executor, serving
from tfx_bridge.components.serving_pusher.errors import PusherConfigError

MODEL_KEY = executor.MODEL_KEY
PUSHED_MODEL_KEY = executor.PUSHED_MODEL_KEY


class ServingPusherSpec(component_spec.ComponentSpec):
    """Model + any blessings (+ Examples for warmup) -> PushedModel."""

    PARAMETERS = {
        executor.BASE_PATH_KEY: ExecutionParameter(type=str),
        executor.MODEL_NAME_KEY: ExecutionParameter(type=str),
        executor.LABEL_KEY: ExecutionParameter(type=str, optional=True),
        executor.TARGET_KEY: ExecutionParameter(type=str, optional=True),
        executor.ALLOW_CONTRACT_CHANGE_KEY: ExecutionParameter(type=int, optional=True),
        executor.KEEP_VERSIONS_KEY: ExecutionParameter(type=int, optional=True),
        executor.WARMUP_RECORDS_KEY: ExecutionParameter(type=int, optional=True),
        executor.BATCHING_KEY: ExecutionParameter(type=str, optional=True),
        executor.SERVER_BASE_PATH_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        executor.IMPORTED_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model,
                                                      optional=True),
        executor.SCHEMA_GUARD_KEY: ChannelParameter(type=standard_artifacts.ExampleAnomalies,
                                                    optional=True),
        executor.MODEL_BLESSING_KEY: ChannelParameter(type=standard_artifacts.ModelBlessing,
                                                      optional=True),
        executor.INFRA_BLESSING_KEY: ChannelParameter(type=standard_artifacts.InfraBlessing,
                                                      optional=True),
        executor.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS = {PUSHED_MODEL_KEY: ChannelParameter(type=standard_artifacts.PushedModel)}


class ServingPusher(base_component.BaseComponent):
    """Validated, atomic pushes to a TF Serving model base path.

    Pushes only when every supplied gate is blessed (the model's own
    ``blessed``, SchemaGuard's, the importer's, Evaluator's ModelBlessing,
    InfraBlessing); loads the model in a fresh process and refuses a
    ``serving_default`` that breaks the served version's contract (renamed or
    removed inputs, dtype changes) or a model the target cannot run; checks a
    ``model.tflite`` beside the SavedModel against its ``serving_default``;
    writes warmup requests and replays them (through model.tflite too);
    stages, fsyncs and renames to the next integer version under a lock;
    writes models.config (labels stable/canary), batching_parameters.txt,
    monitoring.config and a Kubernetes manifest; keeps the newest versions and
    every labeled one. ``server_base_path`` is where the server sees
    ``base_path`` (default ``/models``, the manifest's mount): every
    ``base_path`` in models.config points under it.

    Outputs:
      pushed_model: ``standard_artifacts.PushedModel`` with ``pushed`` (1/0),
        ``pushed_destination``, ``pushed_version``, ``push_reason``.

    Example:
      >>> from tfx_bridge.components import ServingPusher
      >>> pusher = ServingPusher(model=optimizer.outputs["optimized_model"],  # doctest: +SKIP
      ...                        schema_guard=guard.outputs["anomalies"],
      ...                        base_path="/serving/models", model_name="ctr")
    """

    SPEC_CLASS = ServingPusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, model, base_path: str, model_name: str, imported_model=None,
                 schema_guard=None, model_blessing=None, infra_blessing=None, examples=None,
                 label: str = "stable", target: str = "cpu",
                 allow_contract_change: bool = False,
                 keep_versions: int = serving.DEFAULT_KEEP_VERSIONS,
                 warmup_records: int = serving.DEFAULT_WARMUP_RECORDS,
                 batching_parameters: Optional[dict] = None,
                 server_base_path: str = serving.SERVER_MOUNT):
        if label not in serving.LABELS:
            raise PusherConfigError(f"ServingPusher: label {label!r}; use {serving.LABELS}.")
        if target not in serving.TARGETS:
            raise PusherConfigError(f"ServingPusher: target {target!r}; use {serving.TARGETS}.")
        serving.check_model_name(model_name)
        if keep_versions < 1:
            raise PusherConfigError("ServingPusher: keep_versions must be >= 1.")
        if not 1 <= warmup_records <= serving.MAX_WARMUP:
            raise PusherConfigError(
                f"ServingPusher: warmup_records {warmup_records}: use 1 to {serving.MAX_WARMUP} "
                "(TF Serving replays them at load; a push always writes warmup).")
        spec = ServingPusherSpec(
            model=model, imported_model=imported_model, schema_guard=schema_guard,
            model_blessing=model_blessing, infra_blessing=infra_blessing, examples=examples,
            base_path=base_path, model_name=model_name, label=label, target=target,
            allow_contract_change=int(bool(allow_contract_change)),
            keep_versions=keep_versions, warmup_records=warmup_records,
            batching_parameters=None if batching_parameters is None
            else json.dumps(batching_parameters),
            server_base_path=server_base_path,
            pushed_model=channel.Channel(type=standard_artifacts.PushedModel))
        super().__init__(spec=spec)
