"""The catalog run's results file (``benchmarks/results/catalog.jsonl``): its rows
read back (:func:`read_rows`), the words they use (families, hand-over forms,
model-level statuses, the ONNX op and node a message names) and the Markdown
totals ``import_models.py --catalog --summary`` prints (:func:`catalog_summary`).
"""
from __future__ import annotations

import json
import os
import re

CATALOG_FAMILIES = ("torchvision", "transformers", "transformers_media", "torch_nn",
                    "detection")
CATALOG_FORMS = ("state_dict", "torchscript", "onnx")
# Rows about the model itself, not one conversion.
MODEL_LEVEL = ("skipped", "not_built", "excluded")
_OP_NODE = re.compile(r"ONNX op (\S+) \(node ([^,)]+)")


def read_rows(path: str) -> list:
    rows = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:  # a line cut by a killed run
                        continue
    return rows


def op_node(message: str):
    m = _OP_NODE.search(message or "")
    return (m.group(1), m.group(2)) if m else (None, None)


def _reason(row: dict) -> str:
    """One line: the op and node when the message names them, else the message's head."""
    message = (row.get("message") or "").replace("\n", " ")
    if row.get("export_cause"):  # the SavedModel failed where the export already did
        return f"{message[:120]} | {row['export_cause'][:240]}"
    return message[:240]


def catalog_summary(rows: list) -> str:
    """Markdown: totals per family (and hand-over form), then every failure with its reason."""
    import collections

    def column(rs):
        n = collections.Counter(r["status"] for r in rs)
        failed = n["not_equivalent"] + n["error"] + n["crash"] + n["timeout"]
        return (f"{n['verified']} / {n['refused']} / {failed} / {n['unstable_reference']}"
                if rs else "-")

    models = collections.defaultdict(set)
    level = collections.defaultdict(collections.Counter)
    for r in rows:
        models[r["family"]].add(r["model"])
        if r["status"] in MODEL_LEVEL:
            level[r["family"]][r["status"]] += 1
    runs = [r for r in rows if r["status"] not in MODEL_LEVEL]
    out = ["| family | hand-over | models | not text (excluded) | skipped (>100M params) | "
           "not built | "
           "hand-over failed | importer (auto): verified / refused / failed / unstable reference | "
           "verified by (auto's choice) | plain onnx2tf: verified / refused / failed / "
           "unstable |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for family in [f for f in CATALOG_FAMILIES if f in models]:
        for form in ("all",) + CATALOG_FORMS:
            fam = [r for r in runs if r["family"] == family and (form == "all"
                                                                 or r["form"] == form)]
            if form != "all" and not fam:
                continue
            ours = [r for r in fam if r["converter_requested"] != "onnx2tf"
                    and r["status"] != "handover_failed"]
            plain = [r for r in fam if r["converter_requested"] == "onnx2tf"
                     and r["status"] != "handover_failed"]
            used = collections.Counter(r.get("converter") for r in ours
                                       if r["status"] == "verified")
            handover = len({(r["model"], r["form"]) for r in fam
                            if r["status"] == "handover_failed"})
            first = form == "all"
            out.append(
                f"| {family if first else ''} | {form} | "
                f"{len(models[family]) if first else ''} | "
                f"{level[family]['excluded'] if first else ''} | "
                f"{level[family]['skipped'] if first else ''} | "
                f"{level[family]['not_built'] if first else ''} | {handover} | {column(ours)} | "
                f"{', '.join(f'{k} {v}' for k, v in used.most_common()) or '-'} | "
                f"{column(plain)} |")
    rates = []
    for form in CATALOG_FORMS:
        judged = [r for r in runs if r["form"] == form and r["converter_requested"] == "auto"
                  and r["status"] != "handover_failed"]
        if judged:
            ok = sum(r["status"] == "verified" for r in judged)
            rates.append(f"{form} {ok} of {len(judged)} ({100 * ok / len(judged):.1f}%)")
    floors = sum(bool(r.get("atol_from")) for r in runs)
    out += ["", "Verified per hand-over form (auto, every family; a hand-over that failed "
            "is not a row with a verdict): " + ", ".join(rates) + "."
            + (f" Tolerance: 1e-4 x max(1, output scale), or twice torch float32's own "
               f"error against float64 on the verification's inputs where that is wider "
               f"({floors} rows, `atol_from`)." if floors else "")]
    out += ["", "Failed: not equivalent, importer error, crash or timeout. Refused: the importer "
            "stopped with its message, nothing written. Unstable reference: not equivalent, "
            "and torch's own float32 output is off by more than the tolerance: against the "
            "same rows run one at a time (batch 7), or against torch in float64 (batch 32): "
            "a randomly initialised deep net that amplifies rounding; no float32 converter "
            "can be checked against it at that tolerance. Those rows carry torch_fp32_error "
            "and the SavedModel's own error against float64 (savedmodel_fp64_error).", ""]
    bad = [r for r in runs if r["status"] not in ("verified",)]
    if bad:
        out += ["### Failures and refusals", ""]
        for r in sorted(bad, key=lambda r: (r["family"], r["model"], r["form"],
                                            r["converter_requested"])):
            fp64 = ""
            if r.get("torch_fp32_error") is not None:
                fp64 = (f" [against torch in float64: torch float32 off by "
                        f"{r['torch_fp32_error']:.3g}, the SavedModel by "
                        f"{r['savedmodel_fp64_error']:.3g}]")
            out.append(f"- {r['family']} {r['model']} ({r['form']}, {r['converter_requested']}"
                       f"{' -> ' + r['converter'] if r.get('converter') else ''}): "
                       f"{r['status']}: {_reason(r)}{fp64}")
        unstable = [r for r in bad if r["status"] == "unstable_reference"
                    and r.get("torch_fp32_error") is not None]
        if unstable:
            closer = sum(r["savedmodel_fp64_error"] <= r["torch_fp32_error"] for r in unstable)
            out += ["", f"Unstable references: the SavedModel is as close to torch's float64 "
                        f"output as torch's own float32 output is, or closer, for {closer} of "
                        f"{len(unstable)}."]
        counts = collections.Counter()
        for r in bad:
            if r["status"] == "handover_failed":
                continue
            op = r.get("op") or op_node(r.get("message") or "")[0]
            counts[(r["converter_requested"], r["status"], op or "-")] += 1
        out += ["", "### Most common (converter, status, ONNX op)", ""]
        out += [f"- {conv} {status} {op}: {n}" for (conv, status, op), n in counts.most_common(25)]
    # What the faithful converter refused, whether auto then fell back to onnx2tf or not:
    # the ops to implement next, with the models that need them.
    ours = collections.defaultdict(list)
    for r in runs:
        if r["converter_requested"] == "onnx2tf":
            continue
        messages = [a["message"] for a in r.get("attempts") or []
                    if a.get("converter") == "tfx-bridge"]
        if r["status"] == "refused" and not messages and r.get("error_type") == "ConversionError":
            messages = [r.get("message") or ""]
        for m in messages:
            op = op_node(m)[0] or "-"
            variant = m.split("): ", 1)[1][:120] if "): " in m else m[:120]
            ours[(op, variant)].append(f"{r['model']} ({r['form']})")
    if ours:
        out += ["", "### tfx-bridge converter refusals by ONNX op (auto then fell back or "
                "refused)", ""]
        for (op, variant), where in sorted(ours.items(), key=lambda kv: -len(kv[1]))[:40]:
            out.append(f"- {op} x{len(where)}: {variant} (e.g. {', '.join(where[:4])})")
    out += detection_table(rows)
    skipped = [r for r in rows if r["status"] in ("skipped", "not_built")]
    if skipped:
        out += ["", "### Skipped and not built", ""]
        out += [f"- {r['family']} {r['model']}: {r['status']}: {_reason(r)}"
                for r in sorted(skipped, key=lambda r: (r["family"], r["model"]))]
    return "\n".join(out)


def detection_table(rows: list) -> list:
    """Markdown lines: the detection family, one row per detector, one column per
    hand-over form: the verdict and its image checks (passed / all, ties named), or
    the first failed check."""
    found = {(r["model"], r["form"]): r for r in rows
             if r["family"] == "detection" and r.get("form") in CATALOG_FORMS}
    if not found:
        return []
    out = ["", "### Detectors, per hand-over form", "",
           "| detector | " + " | ".join(CATALOG_FORMS) + " |",
           "|---|" + "---|" * len(CATALOG_FORMS)]
    for model in sorted({m for m, _ in found}):
        cells = []
        for form in CATALOG_FORMS:
            r = found.get((model, form))
            if r is None:
                cells.append("-")
                continue
            checks = r.get("checks_by_reference") or {}
            passed = sum(c["passed"] for c in checks.values())
            total = sum(c["checks"] for c in checks.values())
            ties = sum(c["tie_order"] for c in checks.values())
            straddled = sum(c.get("pixel_boundary", 0) for c in checks.values())
            cell = r["status"].replace("_", " ")
            if total:
                cell += (f", {passed}/{total} checks" + (f" ({ties} tie-order)" if ties else "")
                         + (f" ({straddled} pixel-boundary)" if straddled else ""))
            if r["status"] != "verified":
                cell += f": {(r.get('message') or '').split('; first: ')[-1][:90]}"
            cells.append(cell)
        out.append(f"| {model} | " + " | ".join(cells) + " |")
    return out
