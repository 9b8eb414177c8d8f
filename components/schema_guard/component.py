"""SchemaGuard: the TFX component (spec, class, build-time checks)."""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import channel, component_spec, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_bridge.components.schema_guard import executor
from tfx_bridge.components.schema_guard.errors import SchemaGuardConfigError

EXAMPLES_KEY = executor.EXAMPLES_KEY
SCHEMA_KEY = executor.SCHEMA_KEY
MODEL_KEY = executor.MODEL_KEY
ANOMALIES_KEY = executor.ANOMALIES_KEY
CONTRACT_PATH_KEY = executor.CONTRACT_PATH_KEY
FAIL_ON_ANOMALIES_KEY = executor.FAIL_ON_ANOMALIES_KEY
EXCLUDE_SPLITS_KEY = executor.EXCLUDE_SPLITS_KEY
CHECK_UNKNOWN_FEATURES_KEY = executor.CHECK_UNKNOWN_FEATURES_KEY
BATCH_SIZE_KEY = executor.BATCH_SIZE_KEY
MAX_RECORD_BYTES_KEY = executor.MAX_RECORD_BYTES_KEY
BLESSED_PROPERTY = executor.BLESSED_PROPERTY


class SchemaGuardSpec(component_spec.ComponentSpec):
    """Examples + Schema (+ optional Model / contract file) -> ExampleAnomalies."""

    PARAMETERS = {
        CONTRACT_PATH_KEY: ExecutionParameter(type=str, optional=True),
        FAIL_ON_ANOMALIES_KEY: ExecutionParameter(type=int, optional=True),
        EXCLUDE_SPLITS_KEY: ExecutionParameter(type=str, optional=True),
        CHECK_UNKNOWN_FEATURES_KEY: ExecutionParameter(type=int, optional=True),
        BATCH_SIZE_KEY: ExecutionParameter(type=int, optional=True),
        MAX_RECORD_BYTES_KEY: ExecutionParameter(type=int, optional=True),
    }
    INPUTS = {
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema),
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS = {
        ANOMALIES_KEY: ChannelParameter(type=standard_artifacts.ExampleAnomalies),
    }


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

    def __init__(self, examples, schema, model=None, contract_path: Optional[str] = None,
                 fail_on_anomalies: bool = True, exclude_splits: Optional[Sequence[str]] = None,
                 check_unknown_features: bool = True, batch_size: Optional[int] = None,
                 max_record_bytes: Optional[int] = None):
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
        if (contract_path is not None and "://" not in contract_path
                and not os.path.isabs(contract_path)):
            # Relative paths resolve here, at build time; absolute ones may name a
            # file inside the component image (Kubeflow) and are taken as given.
            if not os.path.exists(contract_path):
                raise SchemaGuardConfigError(
                    f"SchemaGuard: contract file {contract_path!r} does not exist.")
            contract_path = os.path.abspath(contract_path)
        if exclude_splits is not None and (isinstance(exclude_splits, str)
                                           or not all(isinstance(s, str) for s in exclude_splits)):
            raise SchemaGuardConfigError(
                f"SchemaGuard: exclude_splits must be a list of split names, got "
                f"{exclude_splits!r}.")
        for key, value in ((BATCH_SIZE_KEY, batch_size), (MAX_RECORD_BYTES_KEY, max_record_bytes)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value <= 0):
                raise SchemaGuardConfigError(
                    f"SchemaGuard: {key} must be a positive int, got {value!r}.")
        spec = SchemaGuardSpec(
            examples=examples, schema=schema, model=model,
            contract_path=contract_path,
            fail_on_anomalies=int(bool(fail_on_anomalies)),
            exclude_splits=None if exclude_splits is None else json.dumps(list(exclude_splits)),
            check_unknown_features=int(bool(check_unknown_features)),
            batch_size=batch_size,
            max_record_bytes=max_record_bytes,
            anomalies=channel.Channel(type=standard_artifacts.ExampleAnomalies))
        super().__init__(spec=spec)
