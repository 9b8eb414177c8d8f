"""SchemaGuard: the TFX component (spec, class, build-time checks)."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import channel, standard_artifacts

from tfx_bridge.components.schema_guard import executor
from tfx_bridge.components.schema_guard.config import SchemaGuardConfig
from tfx_bridge.components.schema_guard.errors import SchemaGuardConfigError
from tfx_bridge.components.schema_guard.spec import SchemaGuardSpec

_DEFAULTS = SchemaGuardConfig()


class SchemaGuard(base_beam_component.BaseBeamComponent):
    """Checks every record against the schema and the consumer's dtype/shape contract.

    Finds what TFDV's statistics cannot: which records carry the wrong wire
    kind (float_list in an INT feature), value counts off the declared shape,
    missing required features, values outside domains, int64 values that a
    consumer reading int32 would silently wrap, parse specs asking
    tf.io.parse_example for dtypes tf.Example cannot carry, and source Arrow
    types (from ParquetExampleGen) wider than the consumer. Each finding names
    the feature, split, check, expected vs actual, how many records, the first
    few file/record locations with values, and the fix.

    Outputs:
      anomalies: ``standard_artifacts.ExampleAnomalies`` with TFDV ``Anomalies``
        per split (``Split-<name>/SchemaDiff.pb``), ``findings.json``,
        ``report.md``, ``report.html``, and custom property ``blessed`` (1/0)
        that ServingPusher checks.

    Example:
      >>> from tfx import v1 as tfx
      >>> from tfx_bridge.components import ParquetExampleGen, SchemaGuard
      >>> gen = ParquetExampleGen(input_base="/data/clicks")
      >>> schema = tfx.components.ImportSchemaGen(schema_file="schemas/demo.schema.pbtxt")
      >>> guard = SchemaGuard(examples=gen.outputs["examples"],
      ...                     schema=schema.outputs["schema"],
      ...                     contract_path="schemas/demo.contract.yaml")
      >>> guard.outputs["anomalies"].type_name
      'ExampleAnomalies'
    """

    SPEC_CLASS = SchemaGuardSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, examples, schema, model=None,
                 contract_path: Optional[str] = _DEFAULTS.contract_path,
                 fail_on_anomalies: bool = _DEFAULTS.fail_on_anomalies,
                 exclude_splits: Optional[Sequence[str]] = _DEFAULTS.exclude_splits,
                 check_unknown_features: bool = _DEFAULTS.check_unknown_features,
                 batch_size: Optional[int] = _DEFAULTS.batch_size,
                 max_record_bytes: Optional[int] = _DEFAULTS.max_record_bytes):
        """Builds the component.

        Args:
          examples: Examples channel (ParquetExampleGen or any ExampleGen).
          schema: Schema channel (SchemaGen, or ImportSchemaGen over schemas/).
          model: optional Model channel; its ``serving_default`` inputs are the
            consumer contract.
          contract_path: optional contract file (YAML, see schemas/), for
            pipelines with no model yet; read at run time (local or gs://).
          fail_on_anomalies: raise after recording, so nothing downstream runs.
          exclude_splits: split names not to check.
          check_unknown_features: report features the schema lacks.
          batch_size: records per decoded batch.
          max_record_bytes: a record whose header claims more is refused with
            its file and offset (default 64 MiB; records are untrusted input).
        """
        # Every check is the config's, at build time, as the CLI's and the executor's.
        # None keeps meaning "the default", as these parameters always took it.
        config = SchemaGuardConfig(
            contract_path=contract_path, fail_on_anomalies=fail_on_anomalies,
            exclude_splits=_DEFAULTS.exclude_splits if exclude_splits is None
            else exclude_splits,
            check_unknown_features=check_unknown_features,
            batch_size=_DEFAULTS.batch_size if batch_size is None else batch_size,
            max_record_bytes=_DEFAULTS.max_record_bytes if max_record_bytes is None
            else max_record_bytes)
        if (contract_path is not None and "://" not in contract_path
                and not os.path.isabs(contract_path)):
            # Relative paths resolve here, at build time; absolute ones may name a
            # file inside the component image (Kubeflow) and are taken as given.
            if not os.path.exists(contract_path):
                raise SchemaGuardConfigError(
                    f"SchemaGuard: contract file {contract_path!r} does not exist.")
            config = dataclasses.replace(config, contract_path=os.path.abspath(contract_path))
        spec = SchemaGuardSpec(
            examples=examples, schema=schema, model=model, config=config.to_json(),
            anomalies=channel.Channel(type=standard_artifacts.ExampleAnomalies))
        super().__init__(spec=spec)
