"""SchemaGuard executor: unpack artifacts, scan in Beam, write reports, record blessing."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List

import apache_beam as beam
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils
from tfx.utils import path_utils

from tfx_bridge.components.schema_guard import contract as contracts
from tfx_bridge.components.schema_guard import guard, report
from tfx_bridge.components.schema_guard.checks import scan_file
from tfx_bridge.components.schema_guard.config import SchemaGuardConfig
from tfx_bridge.components.schema_guard.decode import split_files
from tfx_bridge.components.schema_guard.errors import AnomaliesFound
from tfx_bridge.components.schema_guard.expectations import (
    GuardConfig,
    expectations_from_schema,
    load_schema,
)
from tfx_bridge.components.schema_guard.findings import Findings
from tfx_bridge.components.schema_guard.spec import (
    ANOMALIES_KEY,
    BLESSED_PROPERTY,
    CONFIG_KEY,
    EXAMPLES_KEY,
    FINDINGS_PROPERTY,
    MODEL_KEY,
    SCHEMA_KEY,
)
from tfx_bridge.storage import fs

_SCAN_FILE = "_scan.json"


class _MergeFindings(beam.CombineFn):
    def create_accumulator(self):
        return Findings()

    def add_input(self, acc, findings):
        return acc.merge(findings)

    def merge_accumulators(self, accs):
        out = Findings()
        for acc in accs:
            out.merge(acc)
        return out

    def extract_output(self, acc):
        return acc


def _write_json(findings: Findings, path: str) -> None:
    fs.write_text(path, json.dumps(findings.to_json()))


def scan_with_beam(pipeline: beam.Pipeline, work: List[tuple], config: GuardConfig,
                   result_path: str) -> None:
    """One Beam element per records file; findings combined globally into ``result_path``."""
    _ = (pipeline
         | "ListFiles" >> beam.Create(work)
         | "Distribute" >> beam.Reshuffle()
         | "ScanFile" >> beam.MapTuple(lambda split, path: scan_file(path, split, config))
         | "Merge" >> beam.CombineGlobally(_MergeFindings())
         | "Write" >> beam.Map(_write_json, result_path))


class Executor(base_beam_executor.BaseBeamExecutor):
    """Checks every record of every split; writes ExampleAnomalies with a blessing."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        examples = artifact_utils.get_single_instance(input_dict[EXAMPLES_KEY])
        schema_uri = artifact_utils.get_single_uri(input_dict[SCHEMA_KEY])
        anomalies = artifact_utils.get_single_instance(output_dict[ANOMALIES_KEY])

        settings = SchemaGuardConfig.from_json(exec_properties[CONFIG_KEY])
        schema = load_schema(schema_uri)
        consumer = None
        if input_dict.get(MODEL_KEY):
            model = artifact_utils.get_single_instance(input_dict[MODEL_KEY])
            consumer = contracts.contract_from_saved_model(path_utils.serving_model_path(
                model.uri, path_utils.is_old_model_artifact(model)))
        if settings.contract_path is not None:
            from_file = contracts.load_contract_file(settings.contract_path)
            consumer = from_file if consumer is None else consumer.merged(from_file)
        config = settings.scan_config(expectations_from_schema(schema),
                                      consumer.features if consumer is not None else ())
        splits = [s for s in artifact_utils.decode_split_names(examples.split_names)
                  if s not in settings.exclude_splits]
        work = [(s, p) for s in splits for p in split_files(examples.uri, s)]
        fs.makedirs(anomalies.uri)
        result_path = fs.join(anomalies.uri, _SCAN_FILE)
        with self._make_beam_pipeline() as pipeline:
            scan_with_beam(pipeline, work, config, result_path)
        findings = Findings.from_json(json.loads(fs.read_text(result_path)))
        fs.remove(result_path)
        findings.merge(guard.spec_findings(config, guard.read_source_schema(examples.uri)))

        context = {"examples": examples.uri, "schema": schema_uri,
                   "consumer": consumer.origin if consumer is not None else "none"}
        summary = report.write_reports(anomalies.uri, findings, splits, schema, context)
        anomalies.split_names = artifact_utils.encode_split_names(splits)
        if examples.has_custom_property("span"):
            anomalies.span = int(examples.get_custom_property("span"))
        anomalies.set_int_custom_property(BLESSED_PROPERTY, 1 if summary["blessed"] else 0)
        anomalies.set_int_custom_property(FINDINGS_PROPERTY, summary["findings"])
        logging.info("SchemaGuard: %s", summary)
        if not summary["blessed"] and settings.fail_on_anomalies:
            lines = report.summary_lines(findings)
            raise AnomaliesFound(
                f"SchemaGuard found {len(lines)} anomal{'y' if len(lines) == 1 else 'ies'} in "
                f"{examples.uri} (report: {os.path.join(anomalies.uri, report.REPORT_MD)}):\n"
                + "\n".join(f"- {line}" for line in lines))
