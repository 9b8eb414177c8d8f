"""Import stage 6: the report, written as report.json and its Markdown form report.md."""
from __future__ import annotations

import json
from typing import Optional, Sequence

from tfx_bridge.artifacts import compare, layout
from tfx_bridge.components.pytorch_model_importer import random_draws
from tfx_bridge.storage import fs


def _num(value, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def check_table(checks: Sequence[dict]) -> str:
    """Markdown table of checks; a check that raised shows its error instead of numbers."""
    if checks and "verdict" in checks[0]:
        return detection_table(checks)
    rows = ["| batch | output | vs | dtype | max abs | max rel | mismatches | ok |",
            "|---|---|---|---|---|---|---|---|"]
    for c in checks:
        verdict = "yes" if c["ok"] else "**NO**"
        if c.get("error"):
            verdict += f" ({c['error']})"
        rows.append(f"| {c['batch']} | {c['output']} | {c['reference']} | {c['dtype']} | "
                    f"{_num(c['max_abs'])} | {_num(c['max_rel'])} | "
                    f"{'-' if c['mismatches'] is None else c['mismatches']} | {verdict} |")
    return "\n".join(rows)


def detection_table(checks: Sequence[dict]) -> str:
    """A detector's checks, one row per image and reference (detection_verify.py)."""
    rows = ["| batch | image | size | vs | detections | boxes | scores | labels | masks | "
            "verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in checks:
        errors = c.get("errors") or {}
        verdict = c["verdict"] if c["verdict"] in ("equal", "tie-order") else \
            f"**{c['verdict']}**"
        if c.get("tied_rows"):
            verdict += f" (rows {c['tied_rows']})"
        if c.get("rows_off"):
            verdict += f" (rows {c['rows_off']})"
        if c.get("got_count") is not None:
            verdict += f" (got {c['got_count']})"
        if c.get("error"):
            verdict += f" ({c['error']})"
        rows.append(f"| {c['batch']} | {c['image']} | {c['size']} | {c['reference']} | "
                    f"{'-' if c.get('count') is None else c['count']} | "
                    f"{_num(errors.get('boxes'))} | {_num(errors.get('scores'))} | "
                    f"{_num(errors.get('labels'))} | {_num(errors.get('masks'))} | "
                    f"{verdict} |")
    return "\n".join(rows)


def _export_faults(report: dict) -> Optional[str]:
    """Where onnxruntime on the exported ONNX already differs from torch, in words."""
    # onnxruntime lacking a kernel (NOT_IMPLEMENTED) says nothing about the export.
    findings = [f for f in report.get("export_check") or []
                if "NOT_IMPLEMENTED" not in (f.get("error") or "")]
    if not findings:
        return None
    parts = []
    for f in findings[:3]:
        if f.get("max_abs") is not None:
            parts.append(f"at batch {f['batch']} onnxruntime's {f['output']} is off torch "
                         f"by {f['max_abs']:.3g}")
        else:
            at = f" at {f['where']}" if f.get("where") else ""
            parts.append(f"at batch {f['batch']} onnxruntime fails{at}: {f['error']}")
    more = f" (and {len(findings) - 3} more)" if len(findings) > 3 else ""
    ort = [c for c in report["checks"] if c["reference"] == "onnxruntime"
           and not (c.get("error") or "").startswith("reference unavailable")]
    faithful = bool(ort) and all(c["ok"] for c in ort)
    return ("the exported ONNX graph is not the torch model: " + "; ".join(parts) + more
            + (". The SavedModel matches onnxruntime wherever onnxruntime runs: the "
               "conversion kept the export's computation; torch's exporter changed it"
               if faithful else ""))


def _torch_rejects(report: dict) -> Optional[str]:
    """Where torch itself raised on a check batch: the model does not take that input,
    whatever any conversion does."""
    from tfx_bridge.components.pytorch_model_importer.verify import REFERENCE_RAISED

    raised = [c for c in report.get("checks") or [] if c["reference"] == "torch"
              and (c.get("error") or "").startswith(REFERENCE_RAISED)]
    if not raised:
        return None
    batches = sorted({c["batch"] for c in raised})
    error = raised[0]["error"][len(REFERENCE_RAISED):]
    return (f"torch itself raises on the check inputs at batch size(s) {batches}: "
            f"{error[:300]}. The model does not take inputs of the declared shapes at "
            "those batch sizes (e.g. frames that come in groups): declare the shapes it "
            "accepts (a fixed batch size where its code needs one).")


def _reference_fails(report: dict) -> Optional[str]:
    """For an ONNX hand-over that onnxruntime cannot run at any batch: that, with the
    node it names. onnxruntime is then the only reference, and there is none."""
    if (report.get("source") or {}).get("kind") != "onnx":
        return None
    ort = [c for c in report["checks"] if c["reference"] == "onnxruntime"]
    if not ort or not all(c.get("error") for c in ort):
        return None
    from tfx_bridge.components.pytorch_model_importer.verify import ort_node

    error = ort[0]["error"]
    op, node = ort_node(error)
    at = f" at ONNX op {op} (node {node})" if node else ""
    return (f"onnxruntime, the only reference an ONNX hand-over is checked against, cannot "
            f"run this file{at}: {error[:300]}. Nothing verifies without a reference: hand "
            "over the model's state_dict or TorchScript (torch becomes the reference), or "
            "export an ONNX file that onnxruntime runs.")


def likely_cause(report: dict) -> Optional[str]:
    """For a model that is not equivalent: what probably went wrong, where, and the fix,
    when the export itself is at fault (onnxruntime on the exported ONNX differs from
    torch, or torch traced Python branches on tensor values); else None."""
    if report["blessed"]:
        return None
    if report.get("random_draws"):
        return random_draws.cause(report["random_draws"]) + "."
    rejected = _torch_rejects(report)
    if rejected:
        return rejected
    unrunnable = _reference_fails(report)
    if unrunnable:
        return unrunnable
    export = _export_faults(report)
    traced = report.get("trace_warnings")
    if not export and not traced:
        return _rounding(report)
    parts = [export] if export else []
    if traced:
        parts.append("torch traced Python control flow on tensor values (TracerWarning) at "
                     + "; ".join(traced)
                     + ". The exported graph keeps only the branches and sizes of its sample "
                     "input (e.g. a MoE layer skipping experts no token chose, a size turned "
                     "into a Python int), so other inputs compute something else")
    return (". ".join(parts) + ". Write those lines with tensor ops instead of Python "
            "branches or ints taken from tensors (run every expert on its possibly empty "
            "token set; use tensor.shape, not int()), or export the ONNX yourself with "
            "dynamic axes and hand it over.")


def _rounding(report: dict) -> Optional[str]:
    """When every failed check is a float output off by no more than float32 rounding
    at its scale (``compare.rounding_atol``): the absolute tolerance, not the
    conversion, is what refused it; the atol that would pass it."""
    if report.get("task") == "detection":  # its checks are per detection, not per output
        return None
    failed = [c for c in report.get("checks") or [] if not c.get("ok")]
    atols = [None if c.get("error") else compare.rounding_atol(c.get("max_abs"),
                                                               c.get("scale"))
             for c in failed]
    if not atols or None in atols:
        return None
    worst, atol = max(failed, key=lambda c: c["max_abs"]), max(atols)
    return (f"every check that failed is off by at most {worst['max_abs']:.3g}, on "
            f"{worst['output']} values up to {worst['scale']:.3g} "
            f"({worst['max_abs'] / max(1.0, worst['scale']):.1g} of them): float32 rounding "
            "in another order of operations, which the absolute tolerance atol "
            f"{report['tolerance']['atol']:g} does not allow at this scale. If that is "
            f"within what the model's use needs, import with atol={atol:g} "
            f"(--atol {atol:g}): twice the largest error seen, rounded up.")


def report_markdown(report: dict) -> str:
    verdict = "equivalent: blessed" if report["blessed"] else "NOT equivalent: not blessed"
    rewrites = report.get("rewrites") or []
    lines = [f"- {r['kind']}: {r['why']} ({', '.join(r['nodes'])})" for r in rewrites]
    return "\n".join([
        "# PyTorchModelImporter report", "",
        f"Result: **{verdict}**", "",
        f"- source: {report['source']['kind']} {report['source']['path']}",
        f"- converter: {report.get('converter')}" + "".join(
            f" (tried first: {a['converter']}, refused: {a['message']})"
            for a in report.get("conversion_attempts") or [] if a["outcome"] == "refused"),
        f"- inputs: {', '.join(report['inputs'])}",
        f"- outputs: {', '.join(report['outputs'])}",
        (f"- tolerance: atol {report['tolerance']['atol']}, rtol {report['tolerance']['rtol']}, "
         "integer outputs exact" if report.get("task") != "detection" else
         "- tolerance: " + "; ".join(f"{k} {v}" for k, v in report["tolerance"].items())),
        f"- check inputs: {report['inputs_from']}",
        *([f"- detections: {report['summary']}; K = "
           f"{report['detection']['detections_per_image']} (from "
           f"{report['detection']['detections_per_image_from']}); boxes "
           f"{report['detection']['boxes']}"] if report.get("task") == "detection" else []),
        f"- max abs error (float outputs): {_num(report['max_abs_error'])}",
        f"- seconds: {report['seconds']}", "",
        "## Rewrites applied", "",
        *(lines or ["none: the model converted as exported"]), "",
        *(["## Likely cause", "", likely_cause(report), ""] if likely_cause(report) else []),
        "## Checks", "",
        check_table(report["checks"]), ""])


def write_report(output_dir: str, report: dict) -> None:
    """report.json and report.md in the output folder."""
    fs.write_text(fs.join(output_dir, layout.REPORT_JSON),
                  json.dumps(report, indent=2, sort_keys=True))
    fs.write_text(fs.join(output_dir, layout.REPORT_MD), report_markdown(report))
