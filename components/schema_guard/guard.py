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

import dataclasses
import json
import math
import os
import re
import threading
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfx_bridge.artifacts import layout, schema_file, tfrecord
from tfx_bridge.components.schema_guard.contract import (
    ARROW_INT_RANGES,
    DTYPES,
    PARSEABLE,
    WIRE_BYTES,
    WIRE_FLOAT,
    WIRE_INT,
    ConsumerFeature,
)
from tfx_bridge.components.schema_guard.errors import (
    SchemaGuardConfigError,
    SchemaGuardInputError,
)
from tfx_bridge.storage import fs

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
DEFAULT_BATCH_SIZE = 4096
SOURCE_SCHEMA_FILE = layout.SOURCE_SCHEMA_FILE  # ParquetExampleGen's sidecar

_KIND_OF_TYPE = {"INT": WIRE_INT, "FLOAT": WIRE_FLOAT, "BYTES": WIRE_BYTES}
_DTYPE_WORD = {WIRE_INT: "int", WIRE_FLOAT: "float", WIRE_BYTES: "bytes"}
_ARROW_FOR_WIRE = {WIRE_INT: "int64", WIRE_FLOAT: "float32", WIRE_BYTES: "string"}


# --------------------------------------------------------------------------- findings


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


# --------------------------------------------------------------------------- expectations


@dataclasses.dataclass(frozen=True)
class Expectation:
    """What the schema says of one feature."""

    name: str
    wire: str
    min_count: Optional[int] = None
    max_count: Optional[int] = None
    shape_text: Optional[str] = None
    required: bool = False
    int_min: Optional[int] = None
    int_max: Optional[int] = None
    float_min: Optional[float] = None
    float_max: Optional[float] = None
    disallow_nan: bool = False
    disallow_inf: bool = False
    string_values: Optional[Tuple[bytes, ...]] = None


def expectations_from_schema(schema) -> Tuple[Expectation, ...]:
    """Per-feature expectations from a TFMD ``Schema`` proto (STRUCT features skipped)."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    domains = {d.name: d for d in schema.string_domain}
    out = []
    for f in schema.feature:
        type_name = schema_pb2.FeatureType.Name(f.type)
        if type_name not in _KIND_OF_TYPE:
            continue
        kw = {}
        if f.HasField("shape"):
            n = 1
            for d in f.shape.dim:
                n *= d.size
            kw.update(min_count=n, max_count=n,
                      shape_text="shape [" + ", ".join(str(d.size) for d in f.shape.dim) + "]")
        elif f.HasField("value_count"):
            vc = f.value_count
            if vc.HasField("min"):
                kw["min_count"] = int(vc.min)
            if vc.HasField("max") and vc.max > 0:
                kw["max_count"] = int(vc.max)
        if f.HasField("presence") and f.presence.min_fraction >= 1.0:
            kw["required"] = True
        if f.HasField("int_domain"):
            if f.int_domain.HasField("min"):
                kw["int_min"] = int(f.int_domain.min)
            if f.int_domain.HasField("max"):
                kw["int_max"] = int(f.int_domain.max)
        if f.HasField("bool_domain") and type_name == "INT":
            kw.update(int_min=0, int_max=1)
        if f.HasField("float_domain"):
            fd = f.float_domain
            if fd.HasField("min"):
                kw["float_min"] = float(fd.min)
            if fd.HasField("max"):
                kw["float_max"] = float(fd.max)
            kw["disallow_nan"] = bool(fd.disallow_nan)
            kw["disallow_inf"] = bool(fd.disallow_inf)
        string_domain = None
        if f.HasField("string_domain"):
            string_domain = f.string_domain
        elif f.HasField("domain") and f.domain in domains:
            string_domain = domains[f.domain]
        if string_domain is not None and type_name == "BYTES":
            kw["string_values"] = tuple(v.encode() for v in string_domain.value)
        out.append(Expectation(f.name, _KIND_OF_TYPE[type_name], **kw))
    return tuple(out)


def load_schema(path: str):
    """A TFMD Schema from a text proto file or a SchemaGen artifact folder."""
    return schema_file.load_schema(path, SchemaGuardConfigError)


@dataclasses.dataclass(frozen=True)
class GuardConfig:
    """Everything a scan needs; picklable, so Beam workers get it whole."""

    expectations: Tuple[Expectation, ...]
    consumer: Tuple[ConsumerFeature, ...] = ()
    batch_size: int = DEFAULT_BATCH_SIZE
    check_unknown_features: bool = True
    # A record header claiming more is refused before anything is allocated.
    max_record_bytes: int = tfrecord.DEFAULT_MAX_RECORD_BYTES


# --------------------------------------------------------------------------- reading


def split_files(examples_dir: str, split: str) -> List[str]:
    folder = fs.join(examples_dir, f"Split-{split}")
    if not fs.isdir(folder):
        have = sorted(d[6:] for d in fs.listdir(examples_dir) if d.startswith("Split-")) \
            if fs.isdir(examples_dir) else []
        raise SchemaGuardInputError(
            f"No split {split!r} in {examples_dir} (no Split-{split}/); splits there: {have}.")
    files = [p for p in (fs.join(folder, e) for e in fs.listdir(folder)) if not fs.isdir(p)]
    if not files:
        raise SchemaGuardInputError(f"{folder} holds no records files.")
    return files


def list_splits(examples_dir: str) -> List[str]:
    if not fs.isdir(examples_dir):
        raise SchemaGuardInputError(f"Examples folder {examples_dir} does not exist.")
    splits = sorted(d[len("Split-"):] for d in fs.listdir(examples_dir)
                    if d.startswith("Split-") and fs.isdir(fs.join(examples_dir, d)))
    if not splits:
        raise SchemaGuardInputError(
            f"{examples_dir} has no Split-<name>/ folders; give an Examples artifact folder "
            "(as ParquetExampleGen or `tfx-bridge ingest` writes).")
    return splits


def read_record_batches(path: str, batch_size: int,
                        max_record_bytes: int = tfrecord.DEFAULT_MAX_RECORD_BYTES,
                        shown: Optional[str] = None) -> Iterator[Tuple[int, List[bytes]]]:
    """(index of the first record in the file, serialized records) per batch.

    Read with tfx_bridge.artifacts.tfrecord, which checks every header and record before
    trusting a length: a forged header is a refusal naming file and offset, not
    a crash in TF's reader.
    """
    for batch in tfrecord.read_batches(path, batch_size, max_record_bytes=max_record_bytes,
                                       error=SchemaGuardInputError,
                                       shown=shown or fs.basename(path)):
        yield batch.first, batch.records


# --------------------------------------------------------------------------- decoding


_WRONG_TYPE = re.compile(r'found (\w+) for feature "(.*)"')


def _wire_kinds(records: Sequence[bytes], feature: str) -> np.ndarray:
    """Per record, the wire kind of ``feature`` ('' when absent or kind unset)."""
    import tensorflow as tf

    feats = tf.io.decode_proto(list(records), "tensorflow.Example", ["features"],
                               [tf.string]).values[0][:, 0]
    entries = tf.io.decode_proto(feats, "tensorflow.Features", ["feature"], [tf.string])
    sizes = entries.sizes[:, 0].numpy()
    flat = tf.boolean_mask(entries.values[0],
                           tf.sequence_mask(sizes, tf.shape(entries.values[0])[1]))
    kv = tf.io.decode_proto(flat, "tensorflow.Features.FeatureEntry", ["key", "value"],
                            [tf.string, tf.string])
    keys = kv.values[0][:, 0].numpy()
    kinds = tf.io.decode_proto(kv.values[1][:, 0], "tensorflow.Feature",
                               ["bytes_list", "float_list", "int64_list"],
                               [tf.string] * 3).sizes.numpy()
    names = np.array(["", WIRE_BYTES, WIRE_FLOAT, WIRE_INT], dtype=object)
    kind_of_entry = names[(kinds * np.array([1, 2, 3])).max(axis=1)]
    owner = np.repeat(np.arange(len(records)), sizes)
    out = np.full(len(records), "", dtype=object)
    mine = keys == feature.encode()
    out[owner[mine]] = kind_of_entry[mine]
    return out


def _kind_of(arr: pa.Array) -> Optional[str]:
    t = arr.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return None
    v = t.value_type
    if pa.types.is_integer(v):
        return WIRE_INT
    if pa.types.is_floating(v):
        return WIRE_FLOAT
    if pa.types.is_binary(v) or pa.types.is_large_binary(v) or pa.types.is_string(v):
        return WIRE_BYTES
    return None


class _Decoder:
    def __init__(self):
        from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder
        self._decoder = ExamplesToRecordBatchDecoder()

    def decode(self, records: List[bytes]) -> List[Tuple[pa.RecordBatch, np.ndarray]]:
        """Decoded groups and the record indices (into ``records``) of their rows.

        Usually one group. When records disagree on a feature's wire kind the
        decoder refuses the batch; it is then split by that feature's kind (read
        with ``decode_proto``), so each group is uniform and every record is
        still checked for everything else.
        """
        out = []
        pending = [np.arange(len(records))]
        while pending:
            index = pending.pop()
            batch = [records[i] for i in index]
            try:
                out.append((self._decoder.DecodeBatch(batch), index))
                continue
            except RuntimeError as e:
                m = _WRONG_TYPE.search(str(e))
                if not m:
                    raise NotExamples(self._unparseable(batch, index), str(e)) from e
                kinds = _wire_kinds(batch, m.group(2))
            # Records without the feature join the largest group.
            values, counts = np.unique(kinds[kinds != ""].astype(str), return_counts=True)
            majority = values[np.argmax(counts)]
            kinds[kinds == ""] = majority
            for kind in values:
                pending.append(index[kinds == kind])
        return out

    def _unparseable(self, batch: List[bytes], index: np.ndarray) -> List[int]:
        """Indices (into the caller's records) of the records that are not tf.Examples."""
        bad = []
        for i, record in zip(index, batch, strict=True):
            try:
                self._decoder.DecodeBatch([record])
            except RuntimeError as e:
                if not _WRONG_TYPE.search(str(e)):
                    bad.append(int(i))
        return bad


class NotExamples(Exception):
    """Records of a batch that do not parse as tf.Example (indices into the batch)."""

    def __init__(self, indices: List[int], message: str):
        super().__init__(message)
        self.indices = indices


# --------------------------------------------------------------------------- checks


_SHOWN_CHARS = 80  # a sample value is shown cut to this: values are untrusted and may be huge


def _fmt_value(v) -> str:
    if isinstance(v, bytes):
        text = repr(v[:_SHOWN_CHARS * 4].decode("utf-8", "backslashreplace"))
        return (text[:_SHOWN_CHARS] + f"... ({len(v)} bytes)'") if len(text) > _SHOWN_CHARS \
            else text
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    if isinstance(v, list):
        shown = ", ".join(_fmt_value(x) for x in v[:8])
        return f"[{shown}{', ...' if len(v) > 8 else ''}]"
    return repr(v)


class _BatchChecker:
    """Checks one decoded batch; rows map to record indices in one file."""

    def __init__(self, config: GuardConfig, split: str, file: str, findings: Findings):
        self.config = config
        self.split = split
        self.file = file
        self.findings = findings

    def emit(self, check, feature, expected, actual, fix, rows: np.ndarray, arr=None,
             first: int = 0, record_index: Optional[np.ndarray] = None):
        if len(rows) == 0:
            return
        samples = []
        for r in rows[:MAX_SAMPLES]:
            rec = int(record_index[r]) if record_index is not None else int(r)
            value = arr[int(r)].as_py() if arr is not None else None
            samples.append({"file": self.file, "record": first + rec,
                            "value": "absent" if value is None else _fmt_value(value)})
        self.findings.add(Finding(check, feature, self.split, expected, actual, fix,
                                  int(len(rows)), samples))

    def check(self, rb: pa.RecordBatch, first: int, record_index: np.ndarray) -> None:
        names = set(rb.schema.names)
        n = rb.num_rows
        emit = self.emit

        def column(name):
            return rb.column(name) if name in names else pa.nulls(n, pa.large_list(pa.int64()))

        known = set()
        for e in self.config.expectations:
            known.add(e.name)
            arr = column(e.name)
            present = np.asarray(arr.is_valid())
            kind = _kind_of(arr) if e.name in names else None
            ri = dict(first=first, record_index=record_index, arr=arr)
            if e.required:
                emit(PRESENCE, e.name, "present in every record (schema presence "
                     "min_fraction 1.0)", "absent", "Write the feature in every record, or relax "
                     "presence in the schema.", np.flatnonzero(~present), **ri)
            if kind is not None and kind != e.wire:
                emit(WIRE_KIND, e.name, f"{e.wire} (schema type "
                     f"{_DTYPE_WORD[e.wire].upper()})", kind,
                     f"Write {e.name!r} as {e.wire} upstream (e.g. cast the column to "
                     f"{_ARROW_FOR_WIRE[e.wire]}) or fix the schema type.",
                     np.flatnonzero(present), **ri)
                continue
            if kind is None:
                continue
            lengths = np.asarray(pc.list_value_length(arr).fill_null(-1))
            if e.min_count is not None or e.max_count is not None:
                lo = -1 if e.min_count is None else e.min_count
                hi = np.iinfo(np.int64).max if e.max_count is None else e.max_count
                bad = present & ((lengths < lo) | (lengths > hi))
                want = e.shape_text or (f"{lo} to {'any' if e.max_count is None else hi} "
                                        "values")
                if e.shape_text is None and lo == hi:
                    want = f"exactly {lo} value(s)"
                emit(VALUE_COUNT, e.name, want, "other value counts",
                     "Emit the declared number of values per record (pad or truncate "
                     "upstream), or update the schema's shape / value_count.",
                     np.flatnonzero(bad), **ri)
            self._check_domain(e, arr, ri)
        if self.config.check_unknown_features:
            for name in sorted(names - known):
                arr = rb.column(name)
                emit(UNKNOWN_FEATURE, name, "only features the schema declares",
                     f"{_kind_of(arr) or 'a'} feature the schema lacks",
                     "Add it to the schema (re-run SchemaGen or edit schemas/), or stop "
                     "writing it.", np.flatnonzero(np.asarray(arr.is_valid())),
                     arr=arr, first=first, record_index=record_index)
        for c in self.config.consumer:
            self._check_consumer(c, column(c.name), c.name in names, first, record_index)

    def _value_rows(self, arr, value_mask: np.ndarray) -> np.ndarray:
        if not value_mask.any():
            return np.zeros(0, dtype=np.int64)
        parents = np.asarray(pc.list_parent_indices(arr))
        return np.unique(parents[value_mask])

    def _check_domain(self, e: Expectation, arr, ri) -> None:
        values = arr.flatten()
        if len(values) == 0:
            return
        if e.wire == WIRE_INT and (e.int_min is not None or e.int_max is not None):
            v = values.to_numpy(zero_copy_only=False)
            bad = np.zeros(len(v), bool)
            if e.int_min is not None:
                bad |= v < e.int_min
            if e.int_max is not None:
                bad |= v > e.int_max
            self.emit(DOMAIN, e.name, f"values in [{e.int_min}, {e.int_max}] (schema "
                      "int_domain)", "values outside", "Fix the values upstream, or widen "
                      "int_domain in the schema.", self._value_rows(arr, bad), **ri)
        elif e.wire == WIRE_FLOAT:
            v = values.to_numpy(zero_copy_only=False)
            bad = np.zeros(len(v), bool)
            with np.errstate(invalid="ignore"):
                if e.float_min is not None:
                    bad |= v < e.float_min
                if e.float_max is not None:
                    bad |= v > e.float_max
            if e.disallow_nan:
                bad |= np.isnan(v)
            if e.disallow_inf:
                bad |= np.isinf(v)
            self.emit(DOMAIN, e.name, f"values in [{e.float_min}, {e.float_max}]"
                      f"{', no NaN' if e.disallow_nan else ''}"
                      f"{', no inf' if e.disallow_inf else ''} (schema float_domain)",
                      "values outside", "Fix the values upstream, or widen float_domain "
                      "in the schema.", self._value_rows(arr, bad), **ri)
        elif e.wire == WIRE_BYTES and e.string_values is not None:
            allowed = pa.array(list(e.string_values), pa.binary())
            inside = pc.is_in(values.cast(pa.binary()), value_set=allowed)
            bad = ~np.asarray(inside.fill_null(False))
            self.emit(DOMAIN, e.name, f"one of the schema's {len(e.string_values)} "
                      "string_domain values", "values outside", "Fix the values upstream, or "
                      "add them to the string_domain in the schema.",
                      self._value_rows(arr, bad), **ri)

    def _check_consumer(self, c: ConsumerFeature, arr, in_batch: bool, first, record_index):
        ri = dict(first=first, record_index=record_index, arr=arr)
        present = np.asarray(arr.is_valid())
        if c.required:
            self.emit(CONSUMER_MISSING, c.name, f"present in every record ({c.origin} "
                      f"reads {c.dtype})", "absent", f"Write {c.name!r} in every record, or "
                      "give the consumer a default.", np.flatnonzero(~present), **ri)
        kind = _kind_of(arr) if in_batch else None
        if kind is None:
            return
        if kind != c.wire:
            self.emit(CONSUMER_KIND, c.name, f"{c.wire} ({c.origin} reads {c.dtype})",
                      kind, f"A {kind} cannot become {c.dtype}: write {c.name!r} as "
                      f"{c.wire} upstream, or change the consumer's dtype.",
                      np.flatnonzero(present), **ri)
            return
        if c.value_range is not None and kind == WIRE_INT:
            v = arr.flatten().to_numpy(zero_copy_only=False)
            lo, hi = c.value_range
            bad = (v < lo) | (v > hi) if len(v) else np.zeros(0, bool)
            self.emit(CONSUMER_RANGE, c.name, f"values in [{lo}, {hi}] ({c.origin} reads "
                      f"{c.dtype})", f"int64 values outside {c.dtype}'s range",
                      f"Casting to {c.dtype} would wrap silently. Clip or re-map the values "
                      f"upstream, or have the consumer take int64.",
                      self._value_rows(arr, bad), **ri)
        count = c.value_count
        if count is not None:
            lengths = np.asarray(pc.list_value_length(arr).fill_null(-1))
            bad = present & (lengths != count)
            shape = "[" + ", ".join(map(str, c.shape)) + "]"
            self.emit(CONSUMER_SHAPE, c.name, f"{count} value(s) per record (shape {shape}, "
                      f"{c.origin})", "other value counts", "Emit exactly that many values "
                      "per record, or declare a free dimension (-1) in the consumer.",
                      np.flatnonzero(bad), **ri)


def _decode_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def scan_file(path: str, split: str, config: GuardConfig, shown_name: Optional[str] = None
              ) -> Findings:
    """Checks every record of one records file.

    tfx_bsl's decoder releases the GIL, so batches are decoded on a few threads
    (a bounded window ahead of the checks) while checks run in order here.
    """
    from concurrent.futures import ThreadPoolExecutor

    findings = Findings()
    name = shown_name or fs.basename(path)
    checker = _BatchChecker(config, split, name, findings)
    threads = _decode_threads()
    local = threading.local()

    def decode(records):
        if not hasattr(local, "decoder"):  # one decoder per thread
            local.decoder = _Decoder()
        return local.decoder.decode(records)

    total = 0
    not_examples: List[int] = []
    why: List[str] = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        window: List = []

        def drain(keep: int) -> None:
            while len(window) > keep:
                first, future = window.pop(0)
                try:
                    groups = future.result()
                except NotExamples as e:  # gathered for the whole file, refused after it
                    not_examples.extend(first + i for i in e.indices)
                    why.append(str(e))
                    continue
                for rb, index in groups:
                    checker.check(rb, first, index)

        for first, records in read_record_batches(path, config.batch_size,
                                                  config.max_record_bytes, name):
            total += len(records)
            window.append((first, pool.submit(decode, records)))
            drain(2 * threads)
        drain(0)
    if not_examples:
        raise SchemaGuardInputError(
            f"{name}: {len(not_examples)} record(s) are not tf.Examples (record index(es) "
            f"{not_examples[:5]}{' ...' if len(not_examples) > 5 else ''}; {why[0]}). Give "
            "Examples as ExampleGen writes them: TFRecords of serialized tf.train.Example.")
    findings.records[split] = findings.records.get(split, 0) + total
    return findings


# --------------------------------------------------------------------------- spec checks


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
                            f"({c.origin})", f"schema type {_DTYPE_WORD[e.wire].upper()} "
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
    return json.loads(fs.read_text(path))


def scan_examples(examples_dir: str, config: GuardConfig,
                  splits: Optional[Iterable[str]] = None) -> Findings:
    """Every split, in-process (the CLI and tests); the executor does the same in Beam."""
    findings = spec_findings(config, read_source_schema(examples_dir))
    for split in splits or list_splits(examples_dir):
        for path in split_files(examples_dir, split):
            findings.merge(scan_file(path, split, config))
    return findings
