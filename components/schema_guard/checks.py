"""SchemaGuard's record checks: a decoded batch against the schema and the consumer
(Arrow/numpy kernels), and a whole file."""
from __future__ import annotations

import math
import os
import threading
from typing import List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfx_bridge.components.schema_guard.contract import (
    WIRE_BYTES,
    WIRE_FLOAT,
    WIRE_INT,
    ConsumerFeature,
)
from tfx_bridge.components.schema_guard.decode import (
    Decoder,
    NotExamples,
    kind_of,
    read_record_batches,
)
from tfx_bridge.components.schema_guard.errors import (
    SchemaGuardInputError,
)
from tfx_bridge.components.schema_guard.expectations import (
    Expectation,
    GuardConfig,
)
from tfx_bridge.components.schema_guard.findings import (
    ARROW_FOR_WIRE,
    CONSUMER_KIND,
    CONSUMER_MISSING,
    CONSUMER_RANGE,
    CONSUMER_SHAPE,
    DOMAIN,
    DTYPE_WORD,
    MAX_SAMPLES,
    PRESENCE,
    UNKNOWN_FEATURE,
    VALUE_COUNT,
    WIRE_KIND,
    Finding,
    Findings,
)
from tfx_bridge.storage import fs

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
            kind = kind_of(arr) if e.name in names else None
            ri = dict(first=first, record_index=record_index, arr=arr)
            if e.required:
                emit(PRESENCE, e.name, "present in every record (schema presence "
                     "min_fraction 1.0)", "absent", "Write the feature in every record, or relax "
                     "presence in the schema.", np.flatnonzero(~present), **ri)
            if kind is not None and kind != e.wire:
                emit(WIRE_KIND, e.name, f"{e.wire} (schema type "
                     f"{DTYPE_WORD[e.wire].upper()})", kind,
                     f"Write {e.name!r} as {e.wire} upstream (e.g. cast the column to "
                     f"{ARROW_FOR_WIRE[e.wire]}) or fix the schema type.",
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
                     f"{kind_of(arr) or 'a'} feature the schema lacks",
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
        kind = kind_of(arr) if in_batch else None
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
    # The features the checks read, at the kind each is declared: the schema's, then
    # the consumer's (a kind they disagree on is a finding of its own).
    wires = {c.name: c.wire for c in config.consumer}
    wires.update((e.name, e.wire) for e in config.expectations)

    def decode(records):
        if not hasattr(local, "decoder"):  # one decoder per thread
            local.decoder = Decoder(wires)
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
