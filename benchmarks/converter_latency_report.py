"""The report of ``converter_latency.py``: the Markdown it writes to
benchmarks/results/converter_latency.md (p50 tables per oneDNN setting, ratios
ours/onnx2tf and after TrtOptimizer, the share of the gap the optimizer recovered,
Transpose counts per served graph, a summary) from the per-model rows it
measured (or read back with ``--from-jsonl``).
"""
from __future__ import annotations

import os

BATCHES = (1, 32)  # the batch sizes converter_latency.py times
VARIANTS = ("ours", "onnx2tf", "optimized")


def _ms(row, key, variant, b):
    try:
        return row[key]["p50_ms"][variant][str(b)]
    except (KeyError, TypeError):
        return None


def _f(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def _pair(row, key, variant, fmt="{:.3f}"):
    return " / ".join(_f(_ms(row, key, variant, b), fmt) for b in BATCHES)


def _ratio(row, key, num, den):
    out = []
    for b in BATCHES:
        n, d = _ms(row, key, num, b), _ms(row, key, den, b)
        out.append(None if n is None or not d else n / d)
    return out


def _recovered(row, key):
    """Share of ours' excess over onnx2tf that the optimizer removed, per batch."""
    out = []
    for b in BATCHES:
        ours, theirs, opt = (_ms(row, key, v, b) for v in VARIANTS)
        if None in (ours, theirs, opt) or ours <= theirs:
            out.append(None)
        else:
            out.append((ours - opt) / (ours - theirs))
    return out


def _counts(row, variant):
    t = row.get("onednn_off", {}).get("transposes", {}).get(variant)
    if not t:
        return "-"
    return f"{t['saved']} → {t['served']}"


def table(rows, key: str) -> list:
    lines = ["| model | ours p50 b1 / b32 (ms) | onnx2tf p50 b1 / b32 (ms) | ratio ours/onnx2tf "
             "b1 / b32 | ours after TrtOptimizer b1 / b32 (ms) | after/ours b1 / b32 | "
             "gap recovered b1 / b32 | kept candidate |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            why = "; ".join(
                f"{v}: {r[v].get('error') or ('blessed' if r[v]['blessed'] else 'NOT blessed')}"
                for v in ("ours", "onnx2tf"))
            lines.append(f"| {r['model']} | not compared: {why} ||||||| ")
            continue
        if "error" in r.get(key, {}):
            lines.append(f"| {r['model']} | timing failed: {r[key]['error']} ||||||| ")
            continue
        ratio = " / ".join(_f(x, "{:.2f}") for x in _ratio(r, key, "ours", "onnx2tf"))
        after = " / ".join(_f(x, "{:.2f}") for x in _ratio(r, key, "optimized", "ours"))
        rec = " / ".join("-" if x is None else f"{100 * x:.0f}%" for x in _recovered(r, key))
        lines.append(f"| {r['model']} | {_pair(r, key, 'ours')} | {_pair(r, key, 'onnx2tf')} | "
                     f"{ratio} | {_pair(r, key, 'optimized')} | {after} | {rec} | "
                     f"{r['optimizer']['candidate']} ({r['optimizer']['backend']}) |")
    return lines


def transpose_table(rows) -> list:
    lines = ["| model | ours: saved → served | onnx2tf: saved → served | ours after "
             "TrtOptimizer: saved → served |", "|---|---|---|---|"]
    for r in rows:
        if "skipped" in r or "transposes" not in r.get("onednn_off", {}):
            continue
        lines.append(f"| {r['model']} | {_counts(r, 'ours')} | {_counts(r, 'onnx2tf')} | "
                     f"{_counts(r, 'optimized')} |")
    return lines


def _geomean(values):
    import math

    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows, runtime_s: float, args) -> list:
    timed = [r for r in rows if "p50_ms" in r.get("onednn_off", {})]
    lines = []
    if not timed:
        return ["No model was timed."]
    for i, b in enumerate(BATCHES):
        ratios = [_ratio(r, "onednn_off", "ours", "onnx2tf")[i] for r in timed]
        after = [_ratio(r, "onednn_off", "optimized", "onnx2tf")[i] for r in timed]
        slower = [r["model"] for r, x in zip(timed, ratios, strict=True) if x and x > 1.1]
        lines.append(f"- Batch {b}, oneDNN off: ours/onnx2tf p50 geometric mean "
                     f"{_f(_geomean(ratios), '{:.2f}')} over {len(timed)} models "
                     f"(after TrtOptimizer {_f(_geomean(after), '{:.2f}')}); ours more than "
                     f"10% slower on {', '.join(slower) or 'none'}.")
    kept = {}
    for r in timed:
        kept.setdefault(r["optimizer"]["candidate"], []).append(r["model"])
    lines.append("- TrtOptimizer kept: " + "; ".join(f"{c} for {', '.join(m)}"
                                                     for c, m in sorted(kept.items())) + ".")
    lines.append(f"- Run: {runtime_s / 60:.1f} min wall on this host ({os.cpu_count()} CPUs, "
                 f"shared), p50 of {args.iterations} calls after {args.warmup} warm-ups, "
                 f"interleaved in {args.rounds} rounds (ours, onnx2tf, optimized in one fresh "
                 "child process per oneDNN setting).")
    return lines


def write_markdown(rows, runtime_s: float, args, why: str) -> str:
    lines = ["# Converter latency: tfx-bridge vs onnx2tf served graphs (CPU)", "",
             "Generated by `benchmarks/converter_latency.py`. Each model imported twice "
             "(`converter=\"tfx-bridge\"` and `converter=\"onnx2tf\"`); TrtOptimizer's core "
             "(`optimize.optimize`, CPU path, default candidates) run on our Model folder; "
             "then the three `serving_default` signatures timed interleaved in a fresh child "
             "process on the same inputs, inter/intra-op threads default. Ratio > 1: ours "
             "slower. \"Gap recovered\": share of ours' excess over onnx2tf removed by the "
             "optimizer (only where ours is slower).", "",
             "## oneDNN off (`TF_ENABLE_ONEDNN_OPTS=0`, stock TF Serving CPU kernels)", ""]
    lines += table(rows, "onednn_off")
    if any("onednn_on" in r for r in rows):
        lines += ["", "## oneDNN on (`TF_ENABLE_ONEDNN_OPTS=1`)", ""]
        lines += table(rows, "onednn_on")
    lines += ["", "## Transpose ops per served graph", "",
              "Saved: Transpose nodes reachable from `serving_default` in the SavedModel "
              "(per call site, nested functions included). Served: Transpose nodes in the "
              "partition graphs a TF1 Session (TF Serving's Session::Run) executes after "
              "Grappler and function inlining, oneDNN off, batch 1.", ""]
    lines += transpose_table(rows)
    lines += ["", "## Summary", ""] + summary(rows, runtime_s, args)
    if why:
        lines += ["", "## Why", "", why]
    return "\n".join(lines) + "\n"
