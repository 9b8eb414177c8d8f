"""SchemaGuard's outputs: TFDV Anomalies protos per split, and readable reports.

Layout (a contract: docs/ARCHITECTURE.md), under the ExampleAnomalies artifact folder:
``Split-<name>/SchemaDiff.pb`` (binary ``Anomalies``, where stock
ExampleValidator writes it, so ``tfdv.load_anomalies_binary`` and notebooks
read it), ``findings.json``, ``report.md`` and ``report.html`` at the root.

No TFX imports.
"""
from __future__ import annotations

import html
import json
from typing import Dict, Iterable, List, Optional

from tfx_bridge.artifacts import layout
from tfx_bridge.components.schema_guard.findings import (
    CONSUMER_KIND,
    CONSUMER_MISSING,
    CONSUMER_RANGE,
    CONSUMER_SHAPE,
    DOMAIN,
    PARSE_DTYPE,
    PRESENCE,
    SCHEMA_VS_CONSUMER,
    SOURCE_NARROWING,
    UNKNOWN_FEATURE,
    VALUE_COUNT,
    WIRE_KIND,
    Finding,
    Findings,
)
from tfx_bridge.storage import fs
from tfx_bridge.storage.names import child

ANOMALIES_FILE = "SchemaDiff.pb"
FINDINGS_FILE = "findings.json"
REPORT_MD = layout.REPORT_MD
REPORT_HTML = "report.html"

_REASON = {
    WIRE_KIND: "UNEXPECTED_DATA_TYPE",
    VALUE_COUNT: "INVALID_FEATURE_SHAPE",
    PRESENCE: "FEATURE_TYPE_LOW_FRACTION_PRESENT",
    UNKNOWN_FEATURE: "SCHEMA_NEW_COLUMN",
    CONSUMER_KIND: "UNEXPECTED_DATA_TYPE",
    CONSUMER_RANGE: "INT_TYPE_BIG_INT",
    CONSUMER_SHAPE: "INVALID_FEATURE_SHAPE",
    CONSUMER_MISSING: "FEATURE_TYPE_NOT_PRESENT",
    SCHEMA_VS_CONSUMER: "UNEXPECTED_DATA_TYPE",
    PARSE_DTYPE: "CUSTOM_VALIDATION",
    SOURCE_NARROWING: "CUSTOM_VALIDATION",
}
_DOMAIN_REASON = {"int_domain": "INT_TYPE_BIG_INT", "float_domain": "FLOAT_TYPE_BIG_FLOAT",
                  "string_domain": "ENUM_TYPE_UNEXPECTED_STRING_VALUES"}


def _reason_type(f: Finding) -> str:
    if f.check == DOMAIN:
        return next((r for k, r in _DOMAIN_REASON.items() if k in f.expected),
                    "CUSTOM_VALIDATION")
    return _REASON.get(f.check, "CUSTOM_VALIDATION")


def anomalies_proto(findings: Iterable[Finding], split: str, schema=None):
    """TFDV's ``Anomalies`` for one split: its findings plus split-independent ones."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    out = anomalies_pb2.Anomalies()
    if schema is not None:
        out.baseline.CopyFrom(schema)
    for f in findings:
        if f.split not in (None, split):
            continue
        info = out.anomaly_info[f.feature]
        info.severity = anomalies_pb2.AnomalyInfo.ERROR
        info.path.step.append(f.feature)
        reason = info.reason.add()
        reason.type = anomalies_pb2.AnomalyInfo.Type.Value(_reason_type(f))
        reason.short_description = f"{f.check}: expected {f.expected}"
        reason.description = f.message()
        info.short_description = (reason.short_description if len(info.reason) == 1
                                  else "Multiple errors")
        info.description = " ".join(r.description for r in info.reason)
    return out


def summary_lines(findings: Findings) -> List[str]:
    """One line per finding, in a stable order."""
    return [f.message(findings.records.get(f.split) if f.split else None)
            for f in findings.sorted()]


def summary_table(findings: Findings, width: int = 120) -> str:
    """One row per finding (split, feature, check, expected, actual, records), for a
    terminal; long cells are cut to fit ``width``, report.md keeps the whole prose."""
    head = ("split", "feature", "check", "expected", "actual", "records")
    rows = [head] + [(f.split or "-", f.feature, f.check, f.expected, f.actual,
                      str(f.count) if f.count else "-") for f in findings.sorted()]
    fixed = [max(len(r[i]) for r in rows) for i in range(len(head))]
    # Expected and actual are the long ones: they share what the other columns leave.
    room = max(16, width - sum(fixed[i] for i in (0, 1, 2, 5)) - 2 * (len(head) - 1))
    caps = {3: room // 2, 4: room - room // 2}

    def cell(i: int, text: str) -> str:
        cap = caps.get(i, fixed[i])
        return (text if len(text) <= cap else text[:max(cap - 3, 1)] + "...").ljust(
            min(fixed[i], cap))

    lines = ["  ".join(cell(i, t) for i, t in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * min(fixed[i], caps.get(i, fixed[i]))
                              for i in range(len(head))))
    return "\n".join(lines)


def write_reports(output_dir: str, findings: Findings, splits: List[str], schema=None,
                  context: Optional[Dict[str, str]] = None) -> Dict[str, object]:
    """Writes Split-*/SchemaDiff.pb, findings.json, report.md and report.html."""
    context = dict(context or {})
    ordered = findings.sorted()
    blessed = not ordered
    fs.makedirs(output_dir)
    for split in splits:
        folder = child(output_dir, f"Split-{split}")
        fs.write_bytes(fs.join(folder, ANOMALIES_FILE),
                       anomalies_proto(ordered, split, schema).SerializeToString())
    doc = {"blessed": blessed, "splits": splits, "context": context, **findings.to_json()}
    fs.write_text(fs.join(output_dir, FINDINGS_FILE), json.dumps(doc, indent=2, sort_keys=True))
    fs.write_text(fs.join(output_dir, REPORT_MD), _markdown(findings, splits, context, blessed))
    fs.write_text(fs.join(output_dir, REPORT_HTML), _html(findings, splits, context, blessed))
    return {"blessed": blessed, "findings": len(ordered), "records": dict(findings.records)}


def _rows(findings: Findings):
    for f in findings.sorted():
        where = "; ".join(f"{s['file']}#{s['record']}: {s['value']}" for s in f.samples)
        records = findings.records.get(f.split) if f.split else None
        count = f"{f.count} / {records}" if f.count and records else (str(f.count) if f.count
                                                                       else "spec")
        yield [f.split or "all", f.feature, f.check, f.expected, f.actual, count, where, f.fix]


_HEADERS = ["split", "feature", "check", "expected", "actual", "records", "first locations",
            "fix"]


def md_text(value) -> str:
    """A user string (a feature name, a path) as inert Markdown text: HTML entities for
    ``& < >`` (renderers pass raw HTML through), a backslash before Markdown's
    punctuation, one line.

    >>> print(md_text("<script>x</script> | *a*"))
    &lt;script&gt;x&lt;/script&gt; \\| \\*a\\*
    """
    text = html.escape(" ".join(str(value).split()), quote=False)
    return "".join("\\" + c if c in "\\`*_[]|#!" else c for c in text)


def _markdown(findings: Findings, splits, context, blessed: bool) -> str:
    lines = ["# SchemaGuard report", ""]
    status = ("**clean: blessed**" if blessed
              else f"**{len(findings.by_key)} finding(s): not blessed**")
    lines.append(f"Result: {status}")
    lines.append("")
    for k, v in context.items():
        lines.append(f"- {md_text(k)}: {md_text(v)}")
    lines.append("- records checked: " + ", ".join(
        f"{s}: {findings.records.get(s, 0)}" for s in splits))
    lines.append("")
    if not blessed:
        lines.append("| " + " | ".join(_HEADERS) + " |")
        lines.append("|" + "---|" * len(_HEADERS))
        for row in _rows(findings):
            lines.append("| " + " | ".join(md_text(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def _html(findings: Findings, splits, context, blessed: bool) -> str:
    esc = html.escape
    status = ("<p class=ok>Clean: blessed.</p>" if blessed else
              f"<p class=bad>{len(findings.by_key)} finding(s): not blessed.</p>")
    items = "".join(f"<li>{esc(str(k))}: {esc(str(v))}</li>" for k, v in context.items())
    items += "<li>records checked: " + esc(", ".join(
        f"{s}: {findings.records.get(s, 0)}" for s in splits)) + "</li>"
    table = ""
    if not blessed:
        head = "".join(f"<th>{esc(h)}</th>" for h in _HEADERS)
        body = "".join("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>"
                       for row in _rows(findings))
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return ("<!doctype html><html><head><meta charset=utf-8><title>SchemaGuard report</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;font-size:90%}"
            ".ok{color:#060}.bad{color:#a00;font-weight:bold}</style></head><body>"
            f"<h1>SchemaGuard report</h1>{status}<ul>{items}</ul>{table}</body></html>\n")
