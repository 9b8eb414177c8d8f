"""SchemaGuard's core: a mutation suite over a few hundred clean records.

Each mutation plants one kind of mismatch into otherwise clean data (or into
the consumer contract) and asserts it is caught, with the feature named, the
right check, the right count and the planted record indices.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Dict, List

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2

from tfx_bridge.artifacts.tfrecord import RecordFileError
from tfx_bridge.components.schema_guard import contract as contracts
from tfx_bridge.components.schema_guard import findings as ids  # check ids, file names
from tfx_bridge.components.schema_guard import guard, report
from tfx_bridge.components.schema_guard.checks import scan_file
from tfx_bridge.components.schema_guard.decode import list_splits, split_files
from tfx_bridge.components.schema_guard.errors import SchemaGuardConfigError, SchemaGuardInputError
from tfx_bridge.components.schema_guard.expectations import GuardConfig, expectations_from_schema
from tfx_bridge.components.schema_guard.findings import Finding, Findings

N = 300
PLANTED = [17, 123, 250]

SCHEMA = """
feature { name: "user_id" type: INT value_count { min: 1 max: 1 }
          presence { min_fraction: 1.0 } }
feature { name: "item_id" type: INT value_count { min: 1 max: 1 }
          int_domain { min: 0 max: 999 } presence { min_fraction: 1.0 } }
feature { name: "hour" type: INT shape { dim { size: 1 } } int_domain { min: 0 max: 23 }
          presence { min_fraction: 1.0 } }
feature { name: "price" type: FLOAT value_count { min: 1 max: 1 }
          float_domain { min: 0.0 disallow_nan: true } presence { min_fraction: 1.0 } }
feature { name: "country" type: BYTES domain: "country" value_count { min: 1 max: 1 }
          presence { min_fraction: 1.0 } }
feature { name: "hist" type: INT presence { min_fraction: 1.0 } }
feature { name: "clicked" type: INT bool_domain { } presence { min_fraction: 1.0 } }
string_domain { name: "country" value: "de" value: "fr" value: "us" }
"""

CONTRACT = {
    "user_id": {"dtype": "int32", "shape": []},
    "item_id": {"dtype": "int32", "shape": [], "parse_dtype": "int64"},
    "hour": {"dtype": "int32", "shape": []},
    "price": {"dtype": "float32", "shape": []},
    "country": {"dtype": "string", "shape": []},
    "hist": {"dtype": "int32", "shape": [-1]},
    "clicked": {"dtype": "int64", "shape": []},
}


def clean_rows() -> List[Dict[str, list]]:
    rng = np.random.default_rng(7)
    rows = []
    for i in range(N):
        rows.append({
            "user_id": [int(rng.integers(0, 2**31 - 1))],
            "item_id": [int(rng.integers(0, 1000))],
            "hour": [int(i % 24)],
            "price": [float(np.float32(rng.random() * 50))],
            "country": [[b"de", b"fr", b"us"][i % 3]],
            "hist": [int(x) for x in rng.integers(0, 1000, i % 4)],
            "clicked": [int(i % 2)],
        })
    return rows


def to_example(row: Dict[str, object]) -> bytes:
    ex = tf.train.Example()
    for name, value in row.items():
        kind, values = value if isinstance(value, tuple) else (None, value)
        f = ex.features.feature[name]
        if kind is None:
            kind = ("bytes_list" if values and isinstance(values[0], bytes) else
                    "float_list" if values and isinstance(values[0], float) else
                    "float_list" if name == "price" else "int64_list")
        getattr(f, kind).value.extend(values)
    return ex.SerializeToString()


def write_split(examples_dir: str, rows, split: str = "train", files: int = 2) -> None:
    folder = os.path.join(examples_dir, f"Split-{split}")
    os.makedirs(folder, exist_ok=True)
    per = -(-len(rows) // files)
    for k in range(files):
        path = os.path.join(folder, f"data_tfrecord-{k:05d}-of-{files:05d}.gz")
        with tf.io.TFRecordWriter(path, options="GZIP") as w:
            for row in rows[k * per:(k + 1) * per]:
                w.write(to_example(row))


def config(contract: Dict = None, **kw) -> GuardConfig:
    schema = text_format.Parse(SCHEMA, schema_pb2.Schema())
    features = ()
    if contract is not None:
        features = tuple(contracts.ConsumerFeature(
            name, contracts.normalize_dtype(spec["dtype"], name), tuple(spec["shape"]),
            spec.get("parse_dtype"), True, "contract test") for name, spec in contract.items())
    return GuardConfig(expectations_from_schema(schema), features, **kw)


def run(tmp_path, mutate_row: Callable = None, contract: Dict = CONTRACT, source=None,
        batch_size: int = 64) -> Findings:
    rows = clean_rows()
    if mutate_row is not None:
        for i in PLANTED:
            mutate_row(rows[i])
    examples = str(tmp_path / "examples")
    write_split(examples, rows)
    if source is not None:
        with open(os.path.join(examples, ids.SOURCE_SCHEMA_FILE), "w") as f:
            json.dump(source, f)
    return guard.scan_examples(examples, config(contract, batch_size=batch_size))


def planted_locations():
    """(file, record) of the planted rows: two files of 150 records each."""
    return [(f"data_tfrecord-{i // 150:05d}-of-00002.gz", i % 150) for i in PLANTED]


def only(findings: Findings, check: str, feature: str) -> Finding:
    hits = [f for f in findings.sorted() if f.check == check and f.feature == feature]
    assert len(hits) == 1, [f.message() for f in findings.sorted()]
    return hits[0]


def test_guard_clean_data_zero_findings(tmp_path):
    findings = run(tmp_path)
    assert findings.sorted() == []
    assert findings.records == {"train": N}


@pytest.mark.parametrize("name,mutate,check,feature,count", [
    ("float_in_int", lambda r: r.update(item_id=("float_list", [2.5])), ids.WIRE_KIND,
     "item_id", 3),
    ("int_in_float", lambda r: r.update(price=("int64_list", [3])), ids.WIRE_KIND,
     "price", 3),
    ("bytes_in_int", lambda r: r.update(hour=("bytes_list", [b"7"])), ids.WIRE_KIND,
     "hour", 3),
    ("two_values_in_scalar", lambda r: r.update(item_id=[1, 2]), ids.VALUE_COUNT,
     "item_id", 3),
    ("shape_broken", lambda r: r.update(hour=[]), ids.VALUE_COUNT, "hour", 3),
    ("required_missing", lambda r: r.pop("country"), ids.PRESENCE, "country", 3),
    ("int_domain", lambda r: r.update(hour=[30]), ids.DOMAIN, "hour", 3),
    ("float_domain", lambda r: r.update(price=[-5.0]), ids.DOMAIN, "price", 3),
    ("nan_disallowed", lambda r: r.update(price=[float("nan")]), ids.DOMAIN, "price", 3),
    ("string_domain", lambda r: r.update(country=[b"xx"]), ids.DOMAIN, "country", 3),
    ("bool_domain", lambda r: r.update(clicked=[2]), ids.DOMAIN, "clicked", 3),
    ("unknown_feature", lambda r: r.update(debug=[1]), ids.UNKNOWN_FEATURE, "debug", 3),
    ("int32_overflow", lambda r: r.update(user_id=[2**31]), ids.CONSUMER_RANGE,
     "user_id", 3),
    ("int32_underflow_in_list", lambda r: r.update(hist=[5, -(2**31) - 1]),
     ids.CONSUMER_RANGE, "hist", 3),
])
def test_guard_planted_data_mismatch_caught(tmp_path, name, mutate, check, feature, count):
    findings = run(tmp_path, mutate)
    f = only(findings, check, feature)
    assert f.split == "train" and f.count == count
    assert [(s["file"], s["record"]) for s in f.samples] == planted_locations()
    assert f.fix and f.expected and f.actual
    assert feature in f.message(N) and f"in {count} of {N} record(s)" in f.message(N)


def test_guard_wrong_kind_in_whole_batch_caught(tmp_path):
    """A batch where every record has the wrong kind decodes fine: caught by type."""
    rows = clean_rows()
    for r in rows:
        r["hour"] = ("float_list", [float(r["hour"][0])])
    examples = str(tmp_path / "ex")
    write_split(examples, rows)
    findings = guard.scan_examples(examples, config(CONTRACT))
    f = only(findings, ids.WIRE_KIND, "hour")
    assert f.count == N and f.actual == "float_list"
    consumer = only(findings, ids.CONSUMER_KIND, "hour")
    assert "cannot become int32" in consumer.fix


def test_guard_mixed_kind_message_names_feature_record_and_value(tmp_path):
    findings = run(tmp_path, lambda r: r.update(item_id=("float_list", [2.5])))
    f = only(findings, ids.WIRE_KIND, "item_id")
    msg = f.message(N)
    assert "[train] feature 'item_id' (data_vs_schema.wire_kind): expected int64_list" in msg
    assert "data_tfrecord-00000-of-00002.gz record 17 = [2.5]" in msg
    assert "Fix: Write 'item_id' as int64_list" in msg


def test_guard_int32_overflow_message_names_values_and_fix(tmp_path):
    findings = run(tmp_path, lambda r: r.update(user_id=[2**31]))
    msg = only(findings, ids.CONSUMER_RANGE, "user_id").message(N)
    assert "values in [-2147483648, 2147483647] (contract test reads int32)" in msg
    assert "record 17 = [2147483648]" in msg and "would wrap silently" in msg


@pytest.mark.parametrize("feature,change,check", [
    ("country", {"dtype": "int64", "shape": []}, ids.CONSUMER_KIND),   # bytes as int
    ("hour", {"dtype": "string", "shape": []}, ids.CONSUMER_KIND),     # int as string
    ("price", {"dtype": "int32", "shape": []}, ids.CONSUMER_KIND),     # float as int
    ("item_id", {"dtype": "int32", "shape": [2]}, ids.CONSUMER_SHAPE),
])
def test_guard_planted_consumer_mismatch_caught(tmp_path, feature, change, check):
    contract = {**CONTRACT, feature: change}
    findings = run(tmp_path, contract=contract)
    f = only(findings, check, feature)
    assert f.split == "train" and f.count == N
    if check == ids.CONSUMER_KIND:  # the schema already disagrees with the consumer
        assert only(findings, ids.SCHEMA_VS_CONSUMER, feature).split is None


@pytest.mark.parametrize("parse_dtype", ["int32", "uint8", "float64"])
def test_guard_parse_dtype_wire_cannot_carry_caught(tmp_path, parse_dtype):
    feature = "price" if parse_dtype == "float64" else "item_id"
    dtype = "float32" if feature == "price" else "int32"
    contract = {**CONTRACT, feature: {"dtype": dtype, "shape": [], "parse_dtype": parse_dtype}}
    findings = run(tmp_path, contract=contract)
    f = only(findings, ids.PARSE_DTYPE, feature)
    good = "float32" if feature == "price" else "int64"
    assert f.split is None and f"Parse '{feature}' as tf.{good}, then tf.cast" in f.fix
    assert parse_dtype in f.actual


def test_guard_source_int64_consumed_as_int32_caught(tmp_path):
    source = {"format": "parquet", "columns": {
        "user_id": {"arrow_type": "int64", "feature": "int64_list"},
        "hist": {"arrow_type": "list<item: int32>", "feature": "int64_list"},
        "item_id": {"arrow_type": "int32", "feature": "int64_list"}}}
    findings = run(tmp_path, source=source)
    f = only(findings, ids.SOURCE_NARROWING, "user_id")
    assert f.actual == "int64 at the source (Parquet)" and "take int64" in f.fix
    assert not [x for x in findings.sorted() if x.feature in ("hist", "item_id")]


def test_guard_int32_signature_over_in_range_int64_data_clean(tmp_path):
    """A real SavedModel taking int32 inputs; the int64 wire values all fit."""
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="item_id"),
                                      tf.TensorSpec([None], tf.int32, name="hour"),
                                      tf.TensorSpec([None], tf.float32, name="price")])
        def serve(self, item_id, hour, price):
            return {"score": tf.cast(item_id + hour, tf.float32) * price}

    m = M()
    model_dir = str(tmp_path / "model")
    tf.saved_model.save(m, model_dir, signatures={"serving_default": m.serve})
    contract = contracts.contract_from_saved_model(model_dir)
    assert {(c.name, c.dtype, c.shape) for c in contract.features} == {
        ("item_id", "int32", ()), ("hour", "int32", ()), ("price", "float32", ())}
    rows = clean_rows()
    examples = str(tmp_path / "ex")
    write_split(examples, rows)
    schema = text_format.Parse(SCHEMA, schema_pb2.Schema())
    cfg = GuardConfig(expectations_from_schema(schema), contract.features)
    assert guard.scan_examples(examples, cfg).sorted() == []
    rows[5]["item_id"] = [2**31 + 5]
    rows[5]["hour"] = [3]
    write_split(examples, rows)
    hits = guard.scan_examples(examples, cfg).sorted()
    assert {(h.check, h.feature) for h in hits} == {(ids.CONSUMER_RANGE, "item_id"),
                                                    (ids.DOMAIN, "item_id")}


def test_guard_collects_every_finding_at_once(tmp_path):
    def mutate(r):
        r.update(item_id=("float_list", [1.5]), hour=[99])
        r.pop("country")
    findings = run(tmp_path, mutate)
    checks = {(f.check, f.feature) for f in findings.sorted()}
    assert {(ids.WIRE_KIND, "item_id"), (ids.DOMAIN, "hour"), (ids.PRESENCE, "country"),
            (ids.CONSUMER_MISSING, "country")} <= checks


def test_guard_findings_merge_order_independent(tmp_path):
    rows = clean_rows()
    for i in PLANTED:
        rows[i]["hour"] = [40]
    examples = str(tmp_path / "ex")
    write_split(examples, rows, files=3)
    cfg = config(CONTRACT)
    files = split_files(examples, "train")
    parts = [scan_file(p, "train", cfg) for p in files]
    forward = Findings()
    for p in parts:
        forward.merge(p)
    backward = Findings()
    for p in reversed(parts):
        backward.merge(p)
    assert forward.to_json() == backward.to_json()
    assert only(forward, ids.DOMAIN, "hour").count == 3


def test_report_writes_tfdv_anomalies_and_readable_reports(tmp_path):
    findings = run(tmp_path, lambda r: r.update(hour=[30]))
    schema = text_format.Parse(SCHEMA, schema_pb2.Schema())
    out = str(tmp_path / "report")
    summary = report.write_reports(out, findings, ["train"], schema,
                                   {"examples": "<img src=x onerror=alert(1)>"})
    assert summary["blessed"] is False and summary["findings"] == 1
    with open(os.path.join(out, "Split-train", report.ANOMALIES_FILE), "rb") as f:
        anomalies = anomalies_pb2.Anomalies.FromString(f.read())
    info = anomalies.anomaly_info["hour"]
    assert info.severity == anomalies_pb2.AnomalyInfo.ERROR
    assert info.reason[0].type == anomalies_pb2.AnomalyInfo.INT_TYPE_BIG_INT
    from tensorflow_data_validation.utils import anomalies_util
    loaded = anomalies_util.load_anomalies_binary(
        os.path.join(out, "Split-train", report.ANOMALIES_FILE))
    assert "hour" in loaded.anomaly_info
    doc = json.loads(open(os.path.join(out, report.FINDINGS_FILE)).read())
    assert doc["blessed"] is False and doc["findings"][0]["feature"] == "hour"
    md = open(os.path.join(out, report.REPORT_MD)).read()
    assert "not blessed" in md and r"| train | hour | data\_vs\_schema.domain |" in md
    html = open(os.path.join(out, report.REPORT_HTML)).read()
    assert "<td>hour</td>" in html and "not blessed" in html and "<img" not in html
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;" in md  # text, not markup


def test_contract_file_bad_dtype_listed(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("features:\n  a: {dtype: int33}\n  b: {shape: [1]}\n")
    with pytest.raises(SchemaGuardConfigError,
                       match=r"(?s)feature 'a': unknown dtype 'int33'.*feature 'b': needs at "
                             r"least 'dtype'"):
        contracts.load_contract_file(str(path))


def test_scan_missing_split_folder_refused(tmp_path):
    with pytest.raises(SchemaGuardInputError, match=r"has no Split-<name>/ folders"):
        list_splits(str(tmp_path))


def test_scan_corrupt_records_file_refused(tmp_path):
    folder = tmp_path / "ex" / "Split-train"
    folder.mkdir(parents=True)
    (folder / "data.gz").write_bytes(b"not gzip at all")
    with pytest.raises(RecordFileError, match=r"data\.gz, record 0 at byte 0: the first "
                       r"record header fails its checksum: not a TFRecord file"):
        guard.scan_examples(str(tmp_path / "ex"), config(None))


def test_scan_forged_record_length_refused_not_allocated(tmp_path):
    # The 76-byte file whose header claims a terabyte crashed TF's reader (SIGSEGV).
    import struct

    from tfx_bridge.artifacts import tfrecord

    head = struct.pack("<Q", 1 << 40)
    forged = head + struct.pack("<I", tfrecord.masked_crc(head)) + b"\0" * 64
    folder = tmp_path / "ex" / "Split-train"
    folder.mkdir(parents=True)
    (folder / "data").write_bytes(forged)
    with pytest.raises(RecordFileError, match=r"data, record 0 at byte 0: the record "
                       r"claims 1099511627776 bytes, over the limit of 1048576 bytes"):
        guard.scan_examples(str(tmp_path / "ex"), config(None, max_record_bytes=1 << 20))


def test_scan_records_not_examples_located(tmp_path):
    examples = str(tmp_path / "examples")
    write_split(examples, clean_rows(), files=1)
    path = os.path.join(examples, "Split-train", "data_tfrecord-00000-of-00001.gz")
    records = [r.numpy() for r in tf.data.TFRecordDataset(path, "GZIP")]
    records[70] = records[200] = b"\xff\xfe not a proto"
    with tf.io.TFRecordWriter(path, options="GZIP") as w:
        for r in records:
            w.write(r)
    with pytest.raises(SchemaGuardInputError, match=r"data_tfrecord-00000-of-00001\.gz: 2 "
                       r"record\(s\) are not tf\.Examples \(record index\(es\) \[70, 200\];"):
        guard.scan_examples(examples, config(CONTRACT, batch_size=64))


def test_contract_yaml_alias_bomb_refused_before_it_expands(tmp_path):
    from tfx_bridge.components.schema_guard import contract as contracts

    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join(f"*{prev}" for _ in range(9)) + "]")
    lines.append("features: {x: {dtype: int64, shape: []}, bomb: *i}")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size < 700
    with pytest.raises(Exception, match=r"expands to more than 100000 YAML nodes"):
        contracts.load_contract_file(str(path))


def test_contract_oversized_or_binary_refused(tmp_path):
    from tfx_bridge.components.schema_guard import contract as contracts

    big = tmp_path / "big.yaml"
    big.write_text("features: {}\n" + "#" * (contracts.MAX_CONTRACT_BYTES + 10))
    with pytest.raises(Exception, match=r"is at most 1048576 bytes"):
        contracts.load_contract_file(str(big))
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00features")
    with pytest.raises(Exception, match=r"is not UTF-8 text"):
        contracts.load_contract_file(str(binary))
