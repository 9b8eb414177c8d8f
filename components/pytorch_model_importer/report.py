"""Import stage 6: the report's Markdown form (report.json is written by convert.py)."""
from __future__ import annotations

from typing import Sequence


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
        "## Checks", "",
        check_table(report["checks"]), ""])
