"""SchemaGuard's core: every record of every split against the schema and the consumer.

No TFX imports. Records are read in batches (TF's C++ TFRecord reader),
decoded into Arrow by tfx_bsl's ``ExamplesToRecordBatchDecoder`` and checked
with Arrow/numpy kernels: no per-record Python loops. Only the few sample
values a finding shows are converted to Python.

A batch whose records disagree on a feature's wire kind cannot be decoded;
the wire kinds of that batch are then read with TF's ``decode_proto`` (also
vectorised) and the batch is split into groups of one kind, each decoded and
checked in full, so mixed records are reported and still checked for the rest.

Findings gather per (split, feature, check, expected, actual); each keeps a
count and the first few (file, record index, value) locations, and merges
order-independently, so a Beam combine gives the same report as a loop.
"""
from __future__ import annotations

from typing import Iterable, Optional

from tfx_bridge import limits
from tfx_bridge.components.schema_guard.checks import scan_file
from tfx_bridge.components.schema_guard.contract import (
    ARROW_INT_RANGES,
    DTYPES,
    PARSEABLE,
    WIRE_BYTES,
    WIRE_FLOAT,
    WIRE_INT,
)
from tfx_bridge.components.schema_guard.decode import list_splits, split_files
from tfx_bridge.components.schema_guard.errors import SchemaGuardError
from tfx_bridge.components.schema_guard.expectations import GuardConfig
from tfx_bridge.components.schema_guard.findings import (
    DTYPE_WORD,
    PARSE_DTYPE,
    SCHEMA_VS_CONSUMER,
    SOURCE_NARROWING,
    SOURCE_SCHEMA_FILE,
    Finding,
    Findings,
)
from tfx_bridge.storage import fs


def spec_findings(config: GuardConfig, source_schema: Optional[dict]) -> Findings:
    """Checks that need no records: parse dtypes, source types vs the consumer."""
    out = Findings()
    expected = {e.name: e for e in config.expectations}
    for c in config.consumer:
        if c.parse_dtype is not None and c.parse_dtype not in PARSEABLE:
            wire = DTYPES[c.parse_dtype][0]
            good = {WIRE_INT: "int64", WIRE_FLOAT: "float32", WIRE_BYTES: "string"}[wire]
            out.add(Finding(PARSE_DTYPE, c.name, None,
                            "a parse dtype tf.Example carries (int64, float32, string)",
                            f"tf.io.parse_example asked for {c.parse_dtype}",
                            f"Parse {c.name!r} as tf.{good}, then tf.cast to tf.{c.parse_dtype} "
                            f"({c.origin})."))
        e = expected.get(c.name)
        if e is not None and e.wire != c.wire:
            out.add(Finding(SCHEMA_VS_CONSUMER, c.name, None, f"{c.wire} for {c.dtype} "
                            f"({c.origin})", f"schema type {DTYPE_WORD[e.wire].upper()} "
                            f"({e.wire})", "Make the schema and the consumer agree: change the "
                            "consumer's dtype or the feature's type upstream."))
        col = (source_schema or {}).get("columns", {}).get(c.name)
        if col is None:
            continue
        arrow = str(col.get("arrow_type", ""))
        base = arrow[len("list<item: "):-1] if arrow.startswith("list<item: ") else arrow
        if base in ARROW_INT_RANGES and c.value_range is not None:
            lo, hi = ARROW_INT_RANGES[base]
            clo, chi = c.value_range
            if lo < clo or hi > chi:
                out.add(Finding(SOURCE_NARROWING, c.name, None,
                                f"a source type whose values fit {c.dtype} ({c.origin})",
                                f"{arrow} at the source (Parquet)",
                                f"Values that fit {base} but not {c.dtype} would wrap when "
                                "cast. Make the consumer take int64, or narrow the column to "
                                f"{c.dtype} at the source."))
        if base == "double" and c.dtype == "float64":
            out.add(Finding(SOURCE_NARROWING, c.name, None, f"{c.dtype} values ({c.origin})",
                            "float64 at the source, carried as float32 by tf.Example",
                            "tf.Example has no double: the consumer sees float32 precision. "
                            "Accept float32, or carry the value as bytes/two features."))
    return out


def read_source_schema(examples_dir: str) -> Optional[dict]:
    path = fs.join(examples_dir, SOURCE_SCHEMA_FILE)
    if not fs.exists(path):
        return None
    return limits.read_json(path, SchemaGuardError,
                            "Give the output folder of ParquetExampleGen (or tfx-bridge ingest), "
                            "or remove the file.")


def scan_examples(examples_dir: str, config: GuardConfig,
                  splits: Optional[Iterable[str]] = None) -> Findings:
    """Every split, in-process (the CLI and tests); the executor does the same in Beam."""
    findings = spec_findings(config, read_source_schema(examples_dir))
    for split in splits or list_splits(examples_dir):
        for path in split_files(examples_dir, split):
            findings.merge(scan_file(path, split, config))
    return findings
