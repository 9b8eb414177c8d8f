"""ServingPusher: the TFX component (spec, class, build-time checks)."""
from __future__ import annotations

from typing import Optional

from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel, standard_artifacts

from tfx_bridge.components.serving_pusher import executor
from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.spec import ServingPusherSpec

_DEFAULTS = PusherConfig.defaults()


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
    ``base_path`` in models.config points under it. ``target_cores`` (default:
    the pushing host's usable cores) sizes the server's thread pools;
    ``cpu_allocator`` (default: TF's BFC arena on cpu targets) goes into the
    manifest's environment; batching
    follows the model's measured latency unless ``batching_parameters`` says
    otherwise (docs/guides/serving-config.md).

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
                 label: str = _DEFAULTS.label, target: str = _DEFAULTS.target,
                 allow_contract_change: bool = _DEFAULTS.allow_contract_change,
                 keep_versions: int = _DEFAULTS.keep_versions,
                 warmup_records: int = _DEFAULTS.warmup_records,
                 batching_parameters: Optional[dict] = _DEFAULTS.batching_parameters,
                 server_base_path: str = _DEFAULTS.server_base_path,
                 target_cores: Optional[int] = _DEFAULTS.target_cores,
                 intra_op_parallelism: Optional[int] = _DEFAULTS.intra_op_parallelism,
                 inter_op_parallelism: Optional[int] = _DEFAULTS.inter_op_parallelism,
                 cpu_allocator: Optional[str] = _DEFAULTS.cpu_allocator):
        # Every check is the config's, at build time, as the CLI's and the executor's.
        config = PusherConfig(
            base_path=base_path, model_name=model_name, label=label, target=target,
            allow_contract_change=allow_contract_change, keep_versions=keep_versions,
            warmup_records=warmup_records, batching_parameters=batching_parameters,
            server_base_path=server_base_path, target_cores=target_cores,
            intra_op_parallelism=intra_op_parallelism,
            inter_op_parallelism=inter_op_parallelism, cpu_allocator=cpu_allocator)
        spec = ServingPusherSpec(
            model=model, imported_model=imported_model, schema_guard=schema_guard,
            model_blessing=model_blessing, infra_blessing=infra_blessing, examples=examples,
            config=config.to_json(),
            pushed_model=channel.Channel(type=standard_artifacts.PushedModel))
        super().__init__(spec=spec)
