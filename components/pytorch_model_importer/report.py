"""Import stage 6: the report's Markdown form (report.json is written by convert.py)."""
from __future__ import annotations

from typing import Optional, Sequence


def _num(value, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def check_table(checks: Sequence[dict]) -> str:
    """Markdown table of checks; a check that raised shows its error instead of numbers."""
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


def likely_cause(report: dict) -> Optional[str]:
    """For a model that is not equivalent and whose export traced Python branches on
    tensor values: what probably went wrong, where, and the fix; else None."""
    if report["blessed"] or not report.get("trace_warnings"):
        return None
    return ("torch traced Python control flow on tensor values (TracerWarning) at "
            + "; ".join(report["trace_warnings"])
            + ". The exported graph keeps only the branches its sample input took "
            "(e.g. a MoE layer skipping experts no token chose), so other inputs compute "
            "something else. Write those lines without Python branches on tensor values "
            "(run every expert on its possibly empty token set), or export the ONNX "
            "yourself and hand it over.")


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
        f"- tolerance: atol {report['tolerance']['atol']}, rtol {report['tolerance']['rtol']}, "
        "integer outputs exact",
        f"- check inputs: {report['inputs_from']}",
        f"- max abs error (float outputs): {_num(report['max_abs_error'])}",
        f"- seconds: {report['seconds']}", "",
        "## Rewrites applied", "",
        *(lines or ["none: the model converted as exported"]), "",
        *(["## Likely cause", "", likely_cause(report), ""] if likely_cause(report) else []),
        "## Checks", "",
        check_table(report["checks"]), ""])
