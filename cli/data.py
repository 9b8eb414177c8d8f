"""``ingest`` (ParquetExampleGen's core on DirectRunner) and ``validate``
(SchemaGuard's core)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Dict, Optional

from tfx_bridge.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    add_common,
    positive_int,
    shown,
)
from tfx_bridge.storage import fs, staging

INGEST_WRITES = ("Split-*", "source_schema.json")
VALIDATE_WRITES = ("Split-*", "findings.json", "report.md", "report.html")


def _direct_pipeline_factory(num_workers: Optional[int]) -> Callable[[], Any]:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfx_bridge import beam as beam_options

    args = beam_options.direct_runner_args(num_workers)
    args += beam_options.s3_args(args)
    beam_options.set_filesystem_options(args)

    def make():
        return beam.Pipeline(options=PipelineOptions(args))
    return make


def cmd_ingest(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
    from tfx_bridge.components.parquet_example_gen.config import ParquetConfig
    from tfx_bridge.components.parquet_example_gen.plan import SplitConfig, plan_ingest

    config = ParquetConfig(  # the component's one config, checked the same way
        columns=None if args.columns is None else [c.strip() for c in args.columns.split(",")],
        batch_size=args.batch_size, allow_empty_splits=args.allow_empty_splits)
    progress = Progress(3, enabled=not args.quiet)
    splits = SplitConfig.parse(args.splits, args.pattern, args.partition_feature)
    make_pipeline = _direct_pipeline_factory(args.workers)  # sets Beam's s3 options too
    plan = plan_ingest(args.input_base, splits, columns=config.columns,
                            batch_size=config.batch_size)
    progress(f"Planned {plan.num_rows} rows in {len(plan.files)} file(s), "
             f"{len(plan.units)} row group(s), {len(plan.columns)} column(s)")
    start = time.monotonic()
    with staging.staged_output(args.output, INGEST_WRITES, "ingest") as stage:
        counts = core.ingest(plan, stage, make_pipeline,
                             allow_empty_splits=config.allow_empty_splits)
    seconds = time.monotonic() - start
    progress(f"Wrote {sum(counts.values())} tf.Examples to {args.output}")
    for name, n in counts.items():
        print(f"  Split-{name}: {n} records")
    for col in plan.columns:
        print(f"  {col.name}: {col.arrow_type} -> {col.feature}")
    progress("Done")
    return {
        "output": shown(args.output),
        "rows": plan.num_rows,
        "files": len(plan.files),
        "splits": counts,
        "columns": {c.name: c.feature for c in plan.columns},
        "seconds": round(seconds, 3),
        "rows_per_second": round(plan.num_rows / seconds, 1) if seconds > 0 else None,
    }


def _is_terminal() -> bool:
    return sys.stdout.isatty()


def _terminal_width() -> int:
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError):  # not a terminal after all
        return 120


def cmd_validate(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.schema_guard import contract as contracts
    from tfx_bridge.components.schema_guard import guard, report
    from tfx_bridge.components.schema_guard.config import SchemaGuardConfig
    from tfx_bridge.components.schema_guard.decode import list_splits
    from tfx_bridge.components.schema_guard.expectations import (
        expectations_from_schema,
        load_schema,
    )

    settings = SchemaGuardConfig(  # the component's one config, checked the same way
        contract_path=args.contract, max_record_bytes=args.max_record_mb << 20)
    progress = Progress(3, enabled=not args.quiet)
    schema = load_schema(args.schema)
    consumer = None
    if args.model:
        consumer = contracts.contract_from_saved_model(args.model)
    if settings.contract_path:
        from_file = contracts.load_contract_file(settings.contract_path)
        consumer = from_file if consumer is None else consumer.merged(from_file)
    config = settings.scan_config(expectations_from_schema(schema),
                                  consumer.features if consumer is not None else ())
    splits = list_splits(args.examples)
    progress(f"Checking splits {splits} of {args.examples} against {len(config.expectations)} "
             f"schema features and {len(config.consumer)} consumer features")
    findings = guard.scan_examples(args.examples, config, splits)
    context = {"examples": shown(args.examples), "schema": args.schema,
               "consumer": consumer.origin if consumer is not None else "none"}
    with staging.staged_output(args.output, VALIDATE_WRITES, "validate") as stage:
        summary = report.write_reports(stage, findings, splits, schema, context)
    progress(f"Checked {sum(findings.records.values())} records: "
             f"{summary['findings']} finding(s)")
    lines = report.summary_lines(findings)
    print("Clean: no findings." if not lines else f"{len(lines)} finding(s):")
    if lines and _is_terminal():  # a table reads better; report.md keeps the prose
        print(report.summary_table(findings, _terminal_width()))
    else:
        for line in lines:
            print(f"- {line}")
    print(f"Report: {fs.join(shown(args.output), report.REPORT_MD)}")
    progress("Done")
    return {"blessed": summary["blessed"], "findings": summary["findings"],
            "records": findings.records, "output": shown(args.output),
            "checks": sorted({f.check for f in findings.sorted()}),
            "_exit": EXIT_OK if summary["blessed"] else EXIT_CHECK_FAILED}


def add_parser(sub) -> None:
    """The ingest and validate verbs."""
    from tfx_bridge.components.parquet_example_gen.config import (
        DEFAULT_PATTERN,
        DEFAULT_SPLITS,
        ParquetConfig,
    )
    from tfx_bridge.components.schema_guard.config import SchemaGuardConfig

    ingest = sub.add_parser(
        "ingest", help="Parquet -> Examples layout (Split-*/ gzip TFRecords) on DirectRunner")
    ingest.add_argument("--input-base", required=True, help="folder holding the Parquet files")
    ingest.add_argument("--output", required=True, help="folder for Split-*/ and sidecar")
    ingest.add_argument("--pattern", default=DEFAULT_PATTERN,
                        help=f"glob relative to --input-base (default {DEFAULT_PATTERN})")
    ingest.add_argument("--columns", default=None, help="comma-separated columns to read")
    ingest.add_argument("--splits", default=DEFAULT_SPLITS,
                        help=f"output splits as name:hash_buckets (default {DEFAULT_SPLITS})")
    ingest.add_argument("--partition-feature", default=None,
                        help="hash this column instead of the whole record")
    ingest.add_argument("--batch-size", type=positive_int, default=ParquetConfig().batch_size,
                        help="rows per Arrow batch")
    ingest.add_argument("--allow-empty-splits", action="store_true",
                        help="keep a split that gets no records (refused by default)")
    ingest.add_argument("--workers", type=positive_int, default=None,
                        help="DirectRunner processes (default: in-process)")
    add_common(ingest)
    ingest.set_defaults(func=cmd_ingest)

    validate = sub.add_parser(
        "validate", help="SchemaGuard: check Examples against a schema and a consumer contract")
    validate.add_argument("--examples", required=True,
                          help="Examples folder (Split-*/ gzip TFRecords)")
    validate.add_argument("--schema", required=True, help="TFMD Schema text proto")
    validate.add_argument("--model", default=None,
                          help="SavedModel (or Model artifact) whose serving_default is the "
                          "consumer contract")
    validate.add_argument("--contract", default=None, help="contract file (YAML), see schemas/")
    default_mb = SchemaGuardConfig().max_record_bytes >> 20
    validate.add_argument("--max-record-mb", type=positive_int, default=default_mb,
                          help=f"refuse a record larger than this (default {default_mb})")
    validate.add_argument("--output", required=True,
                          help="folder for Split-*/SchemaDiff.pb and the reports")
    add_common(validate)
    validate.set_defaults(func=cmd_validate)
