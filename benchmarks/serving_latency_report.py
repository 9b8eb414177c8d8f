"""The Markdown of serving_latency.py's results: one table of p50 per backend at both
batch sizes with the spread of the round medians, the ratio ours / onnxruntime (TF
backends with the CPU allocator the pusher configures; ours also without it), and
the top ops of our graph's profile where ours is over 1.25x onnxruntime.

    .venv/bin/python benchmarks/serving_latency_report.py [results.json]
"""
from __future__ import annotations

import json
import os
import sys

COLUMNS = [("ours", "ours"), ("ours/session", "ours Session::Run"),
           ("ours_malloc", "ours, TF's default allocator"), ("ort", "onnxruntime"),
           ("ort/nospin", "onnxruntime, no spin-wait"),
           ("onnx2tf", "onnx2tf"), ("torch", "torch eager"), ("optimized", "TrtOptimizer")]
SESSION = [("ours_malloc/session", "ours Session::Run, TF's default allocator"),
           ("onnx2tf/session", "onnx2tf Session::Run"),
           ("optimized/session", "TrtOptimizer Session::Run")]
ORT = ("ort", "ort/nospin")
SLOW = 1.25


def _cell(row: dict, key: str) -> str:
    p50, spread = row.get("p50_ms", {}).get(key), row.get("spread_ms", {}).get(key)
    if not p50:
        return "-"
    parts = []
    for b in row["batches"]:
        v = p50.get(str(b))
        lo, hi = (spread or {}).get(str(b), (None, None))
        parts.append("-" if v is None else f"{v:.3g} ({lo:.3g}-{hi:.3g})")
    return " / ".join(parts)


def _ratio(row: dict, key: str = "ours") -> list:
    """``key`` over onnxruntime's faster setting (spin-wait on or off), per batch."""
    p50 = row.get("p50_ms", {})
    out = []
    for b in row["batches"]:
        n = p50.get(key, {}).get(str(b))
        d = min((p50[k][str(b)] for k in ORT if str(b) in p50.get(k, {})), default=None)
        out.append(None if n is None or not d else n / d)
    return out


def markdown(results: dict) -> str:
    cols = [(k, t) for k, t in COLUMNS
            if any(k in r.get("p50_ms", {}) for r in results.values())]
    extras = sorted({k for r in results.values() for k in r.get("p50_ms", {})}
                    - {k for k, _ in COLUMNS + SESSION})
    cols += [(k, k) for k in extras]
    lines = ["p50 ms at batch 1 / large batch (min-max of the round medians); "
             "oneDNN off for TF; ratios over onnxruntime's faster setting.", "",
             "| model | batches | " + " | ".join(t for _, t in cols)
             + " | ours / ORT | ours Session::Run / ORT | ours, default allocator / ORT |",
             "|---" * (len(cols) + 5) + "|"]
    for name, row in results.items():
        ratios = " / ".join("-" if r is None else f"{r:.2f}" for r in _ratio(row))
        session = " / ".join("-" if r is None else f"{r:.2f}"
                             for r in _ratio(row, "ours/session"))
        malloc = " / ".join("-" if r is None else f"{r:.2f}"
                            for r in _ratio(row, "ours_malloc"))
        lines.append(f"| {name} | {' / '.join(map(str, row['batches']))} | "
                     + " | ".join(_cell(row, k) for k, _ in cols)
                     + f" | {ratios} | {session} | {malloc} |")
    session_cols = [(k, t) for k, t in SESSION
                    if any(k in r.get("p50_ms", {}) for r in results.values())]
    if session_cols:
        lines += ["", "The other TF backends through Session::Run (p50 ms, same runs):", "",
                  "| model | " + " | ".join(t for _, t in session_cols) + " |",
                  "|---" * (len(session_cols) + 1) + "|"]
        lines += [f"| {name} | " + " | ".join(_cell(row, k) for k, _ in session_cols) + " |"
                  for name, row in results.items()]
    notes = []
    for name, row in results.items():
        for label, err in row.get("errors", {}).items():
            notes.append(f"- {name}: {label} not timed: {err}")
        for label, rec in row.get("prepare", {}).items():
            if "error" in rec or rec.get("blessed") is False:
                notes.append(f"- {name}: {label}: {rec.get('error') or 'not blessed'}")
        big = _ratio(row)[-1]
        prof = row.get("profile_ours")
        if big is not None and big > SLOW and prof:
            top = ", ".join(f"{op} {ms:.3g} ms ({share:.0%})" for op, ms, share in prof["top"][:6])
            notes.append(f"- {name}: ours is {big:.2f}x onnxruntime at batch {prof['batch']}; "
                         f"Session::Run step stats ({prof['nodes_run']} nodes run, "
                         f"{prof['op_ms_sum']:.3g} ms of op time per call): {top}")
        drift = {k: max(v.values()) for k, v in row.get("max_abs_vs_ort", {}).items()}
        if drift:
            notes.append(f"- {name}: max |output - onnxruntime|: "
                         + ", ".join(f"{k} {v:.1e}" for k, v in sorted(drift.items())))
        if "load" in row:
            notes.append(f"- {name}: load average at the end "
                         + " / ".join(f"{x:.1f}" for x in row["load"])
                         + f", {row.get('rounds')} rounds, {row.get('seconds')} s in all")
    return "\n".join(lines + [""] + notes) + "\n"


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results", "serving_latency.json")
    print(markdown(json.load(open(path))))


if __name__ == "__main__":
    main()
