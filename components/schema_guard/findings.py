"""SchemaGuard's findings: check ids, and one Finding per (split, feature, check,
expected, actual) with a count and the first locations, merged order-independently."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from tfx_bridge.artifacts import layout
from tfx_bridge.components.schema_guard.contract import (
    WIRE_BYTES,
    WIRE_FLOAT,
    WIRE_INT,
)

# Check ids: the group says which contracts disagree.
WIRE_KIND = "data_vs_schema.wire_kind"
VALUE_COUNT = "data_vs_schema.value_count"
PRESENCE = "data_vs_schema.presence"
DOMAIN = "data_vs_schema.domain"
UNKNOWN_FEATURE = "data_vs_schema.unknown_feature"
CONSUMER_KIND = "data_vs_consumer.wire_kind"
CONSUMER_RANGE = "data_vs_consumer.range"
CONSUMER_SHAPE = "data_vs_consumer.shape"
CONSUMER_MISSING = "data_vs_consumer.missing"
SCHEMA_VS_CONSUMER = "schema_vs_consumer.wire_kind"
PARSE_DTYPE = "consumer_vs_example.parse_dtype"
SOURCE_NARROWING = "source_vs_consumer.narrowing"

MAX_SAMPLES = 5
# Records per decoded batch: large enough that the checks' per-batch calls cost
# little beside the records' own work, small enough to hold several in flight.
DEFAULT_BATCH_SIZE = 16384
SOURCE_SCHEMA_FILE = layout.SOURCE_SCHEMA_FILE  # ParquetExampleGen's sidecar

KIND_OF_TYPE = {"INT": WIRE_INT, "FLOAT": WIRE_FLOAT, "BYTES": WIRE_BYTES}
DTYPE_WORD = {WIRE_INT: "int", WIRE_FLOAT: "float", WIRE_BYTES: "bytes"}
ARROW_FOR_WIRE = {WIRE_INT: "int64", WIRE_FLOAT: "float32", WIRE_BYTES: "string"}


@dataclasses.dataclass
class Finding:
    """One kind of break on one feature in one split (``split`` None: split-independent)."""

    check: str
    feature: str
    split: Optional[str]
    expected: str
    actual: str
    fix: str
    count: int = 0
    samples: List[dict] = dataclasses.field(default_factory=list)

    @property
    def key(self) -> Tuple:
        return (self.split or "", self.feature, self.check, self.expected, self.actual)

    def merge(self, other: Finding) -> None:
        self.count += other.count
        self.samples = sorted(self.samples + other.samples,
                              key=lambda s: (s["file"], s["record"]))[:MAX_SAMPLES]

    def message(self, records: Optional[int] = None) -> str:
        where = f"[{self.split}] " if self.split else ""
        head = (f"{where}feature {self.feature!r} ({self.check}): expected {self.expected}, "
                f"got {self.actual}")
        if self.count:
            of = f" of {records}" if records else ""
            head += f" in {self.count}{of} record(s)"
        if self.samples:
            shown = "; ".join(f"{s['file']} record {s['record']} = {s['value']}"
                              for s in self.samples)
            head += f", e.g. {shown}"
        return f"{head}. Fix: {self.fix}"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class Findings:
    """Findings keyed for merging, plus records checked per split."""

    def __init__(self):
        self.by_key: Dict[Tuple, Finding] = {}
        self.records: Dict[str, int] = {}

    def add(self, finding: Finding) -> None:
        if finding.key in self.by_key:
            self.by_key[finding.key].merge(finding)
        else:
            self.by_key[finding.key] = finding

    def merge(self, other: Findings) -> Findings:
        for f in other.by_key.values():
            self.add(dataclasses.replace(f, samples=list(f.samples)))
        for split, n in other.records.items():
            self.records[split] = self.records.get(split, 0) + n
        return self

    def sorted(self) -> List[Finding]:
        return [self.by_key[k] for k in sorted(self.by_key)]

    def to_json(self) -> dict:
        return {"records": dict(sorted(self.records.items())),
                "findings": [f.to_json() for f in self.sorted()]}

    @classmethod
    def from_json(cls, doc: dict) -> Findings:
        out = cls()
        for f in doc["findings"]:
            out.add(Finding(**f))
        out.records = dict(doc["records"])
        return out
