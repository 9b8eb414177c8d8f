"""ONNX conformance benchmark: the importer's converter (and plain onnx2tf) on ONNX's node tests.

Every case of ONNX's backend node tests (shipped in the onnx wheel: a model.onnx and
test_data_set_0) goes through the fresh-process route of
``onnx_conformance_tool.run_fresh``: worker children convert and save SavedModels (about
50 cases per child, a per-case timeout, a crashed child's chunk resumed), then a fresh
child with oneDNN off loads each SavedModel and runs ``serving_default`` on the case's
inputs at ONNX's backend tolerances (rtol 1e-3, atol 1e-7; integers and bools exact;
dtype and shape checked). Statuses: pass / refused (by name) / fail / mismatch / crash.

With ``--onnx2tf`` the same cases of the ops torch.onnx.export emits (``--onnx2tf-all``:
every case) also go through plain onnx2tf 1.24.1, called as the importer calls it, and
the same oneDNN-off check.

Per-case JSON lines go to benchmarks/results/onnx_conformance.jsonl (merged by case with
earlier runs, so ``--only`` refreshes a few cases) and docs/OPS.md is regenerated from it.

    .venv/bin/python benchmarks/onnx_conformance.py [--onnx2tf] [--jobs 2] [--only PREFIX ...]

A full run takes about 20 minutes for our column and 50 for onnx2tf's on the shared
2-core dev machine; ``--skip-ours --onnx2tf`` and plain runs can go one after the
other or side by side (each keeps the other's fields); ``--docs-only`` rewrites OPS.md.

Which op a case belongs to is onnx_conformance_ops.py's; docs/OPS.md is written
by onnx_conformance_report.py.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import onnx_conformance_tool as conformance  # noqa: E402
from onnx_conformance_ops import case_op, case_stems, graph_ops, torch_emitted_ops  # noqa: E402
from onnx_conformance_report import O2T_REFUSED, OPS_MD, totals, write_ops_md  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "onnx_conformance.jsonl")
TIMING = os.path.join(HERE, "results", "onnx_conformance_timing.json")
CHUNK = 50
STATUS_ORDER = ("pass", "refused", "fail", "mismatch", "crash")


# --------------------------------------------------------------------------- running


def _chunks(names: List[str], size: int) -> List[List[str]]:
    return [names[i:i + size] for i in range(0, len(names), size)]


def run_column(kind: str, names: List[str], jobs: int, work: str) -> Dict[str, dict]:
    """``names`` through run_fresh in chunks, ``jobs`` chunks at a time; prints progress."""
    chunks = _chunks(names, CHUNK)
    results: Dict[str, dict] = {}
    lock = threading.Lock()
    start = time.perf_counter()

    def one(i: int, chunk: List[str]) -> None:
        root = os.path.join(work, f"{kind}-{i}")
        os.makedirs(root)
        out = conformance.run_fresh(chunk, root, kind=kind)
        with lock:
            results.update(out)
            counts = collections.Counter(r["status"] for r in results.values())
            print(f"[{kind}] chunk {i + 1}/{len(chunks)} done: {len(results)}/{len(names)} "
                  f"cases, {time.perf_counter() - start:.0f} s, "
                  + ", ".join(f"{s} {counts[s]}" for s in STATUS_ORDER if counts[s]),
                  file=sys.stderr, flush=True)
        import shutil
        shutil.rmtree(root, ignore_errors=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for f in [pool.submit(one, i, c) for i, c in enumerate(chunks)]:
            f.result()
    return results


def load_results(path: str = RESULTS) -> Dict[str, dict]:
    rows = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    rows[row["case"]] = row
    return rows


def save_results(rows: Dict[str, dict], path: str = RESULTS) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for name in sorted(rows):
            f.write(json.dumps(rows[name], sort_keys=True) + "\n")


def _merge_timing(timing: Dict[str, str], full: bool) -> Dict[str, str]:
    """The runtime of each column's last full run (kept across partial runs)."""
    try:
        with open(TIMING) as f:
            kept = json.load(f)
    except (OSError, ValueError):
        kept = {}
    if full:
        kept.update(timing)
        os.makedirs(os.path.dirname(TIMING), exist_ok=True)
        with open(TIMING, "w") as f:
            json.dump(kept, f, indent=1, sort_keys=True)
    return kept


# --------------------------------------------------------------------------- main


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx2tf", action="store_true",
                        help="also run plain onnx2tf on the cases of torch-emitted ops")
    parser.add_argument("--onnx2tf-all", action="store_true",
                        help="plain onnx2tf on every selected case")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None,
                        help="case-name prefixes after test_ (default: every case)")
    parser.add_argument("--docs-only", action="store_true",
                        help="regenerate docs/OPS.md from the results file, run nothing")
    parser.add_argument("--skip-ours", action="store_true",
                        help="keep our column from the results file (with --onnx2tf)")
    args = parser.parse_args(argv)

    import onnx
    torch_ops, files, torch_version = torch_emitted_ops()
    if args.docs_only:
        rows = load_results()
        for row in rows.values():  # rows written before the opset field existed
            if "opset" not in row:
                row["opset"] = graph_ops(row["case"])[1]
        save_results(rows)
        write_ops_md(rows, {
            "ops": sorted(torch_ops), "files": files, "torch": torch_version,
            "onnx": onnx.__version__,
            "written": datetime.datetime.now().strftime("%Y-%m-%d %H:%M")},
            _merge_timing({}, full=False))
        print(f"wrote {os.path.relpath(OPS_MD)}", file=sys.stderr)
        return
    names = sorted({n for p in (args.only or [""]) for n in conformance.list_cases(p)})
    print(f"{len(names)} cases; torch {torch_version} emits {len(torch_ops)} ONNX ops "
          f"at opsets <= 17", file=sys.stderr, flush=True)
    stems = case_stems()
    rows = load_results()
    fresh = {}
    for name in names:
        ops, opset = graph_ops(name)
        op_name, how = case_op(name, ops, stems)
        row = {"case": name, "op": op_name, "op_from": how, "ops": ops, "opset": opset,
               "expanded": "_expanded" in name, "torch": op_name in torch_ops}
        old = rows.get(name, {})
        if args.skip_ours:
            row.update({k: old[k] for k in ("status", "detail", "convert_s") if k in old})
        for k in ("onnx2tf", "onnx2tf_detail"):
            if k in old:
                row[k] = old[k]
        fresh[name] = row
    timing = {}
    with tempfile.TemporaryDirectory(prefix="onnx_conformance_") as work:
        if not args.skip_ours:
            start = time.perf_counter()
            ours = run_column("convert", names, args.jobs, work)
            timing["ours"] = (f"{time.perf_counter() - start:.0f} s ({len(names)} cases, "
                             f"{args.jobs} job(s))")
            for name, r in ours.items():
                fresh[name].update(status=r["status"], detail=r["detail"],
                                   convert_s=r["convert_s"])
        if args.onnx2tf or args.onnx2tf_all:
            todo = [n for n in names if args.onnx2tf_all or fresh[n]["torch"]]
            start = time.perf_counter()
            theirs = run_column("onnx2tf", todo, args.jobs, work)
            timing["plain onnx2tf"] = (f"{time.perf_counter() - start:.0f} s ({len(todo)} "
                                      f"cases, {args.jobs} job(s))")
            for name, r in theirs.items():
                fresh[name].update(onnx2tf=r["status"], onnx2tf_detail=r["detail"])
    # Re-read: a run of the other column may have finished meanwhile; keep its fields.
    rows = load_results()
    ours_keys = ("status", "detail", "convert_s")
    theirs_keys = ("onnx2tf", "onnx2tf_detail")
    for name, row in fresh.items():
        old = rows.get(name, {})
        for k in (ours_keys if args.skip_ours else ()) + (
                () if args.onnx2tf or args.onnx2tf_all else theirs_keys):
            if k in old:
                row[k] = old[k]
        if "status" in row or "onnx2tf" in row:
            rows[name] = row
    save_results(rows)
    timing = _merge_timing(timing, full=args.only is None)
    derivation = {"ops": sorted(torch_ops), "files": files, "torch": torch_version,
                  "onnx": onnx.__version__,
                  "written": datetime.datetime.now().strftime("%Y-%m-%d %H:%M")}
    write_ops_md(rows, derivation, timing)
    ours = [r for r in rows.values() if "status" in r]
    print("torch-emitted ops: " + totals([r for r in ours if r["torch"]]), file=sys.stderr)
    print("all ops: " + totals(ours), file=sys.stderr)
    theirs = [r for r in rows.values() if "onnx2tf" in r and r["torch"]]
    if theirs:
        print("plain onnx2tf, torch-emitted ops: " + totals(theirs, "onnx2tf", O2T_REFUSED),
              file=sys.stderr)
    print(f"wrote {os.path.relpath(RESULTS)} and {os.path.relpath(OPS_MD)}", file=sys.stderr)


if __name__ == "__main__":
    main()
