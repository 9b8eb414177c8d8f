"""What SchemaGuard checks against: per-feature expectations read from a TFMD
Schema, and the guard's whole configuration."""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from tfx_bridge.artifacts import schema_file, tfrecord
from tfx_bridge.components.schema_guard.contract import (
    ConsumerFeature,
)
from tfx_bridge.components.schema_guard.findings import (
    DEFAULT_BATCH_SIZE,
    KIND_OF_TYPE,
)


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
        if type_name not in KIND_OF_TYPE:
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
        out.append(Expectation(f.name, KIND_OF_TYPE[type_name], **kw))
    return tuple(out)


def load_schema(path: str):
    """A TFMD Schema from a text proto file or a SchemaGen artifact folder."""
    return schema_file.load_schema(path)


@dataclasses.dataclass(frozen=True)
class GuardConfig:
    """Everything a scan needs; picklable, so Beam workers get it whole."""

    expectations: Tuple[Expectation, ...]
    consumer: Tuple[ConsumerFeature, ...] = ()
    batch_size: int = DEFAULT_BATCH_SIZE
    check_unknown_features: bool = True
    # A record header claiming more is refused before anything is allocated.
    max_record_bytes: int = tfrecord.DEFAULT_MAX_RECORD_BYTES
