"""ONNX conformance benchmark: the importer's converter (and plain onnx2tf) on ONNX's node tests.

Every case of ONNX's backend node tests (shipped in the onnx wheel: a model.onnx and
test_data_set_0) goes through the fresh-process route of
``to_tf.conformance.run_fresh``: worker children convert and save SavedModels (about
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
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import glob
import json
import os
import re
import sys
import tempfile
import threading
import time
from typing import Dict, Iterable, List, Optional, Set

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tfx_bridge.components.pytorch_model_importer.to_tf import conformance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "onnx_conformance.jsonl")
TIMING = os.path.join(HERE, "results", "onnx_conformance_timing.json")
OPS_MD = os.path.join(HERE, os.pardir, "docs", "OPS.md")
CHUNK = 50
TORCH_OPSETS = range(7, 18)  # the TorchScript exporter's symbolic_opset7..17
# Helpers in torch/onnx that create an ONNX node from a name given as their argument.
_TORCH_OP_CALLS = re.compile(
    r"""(?:\bg\.op|add_op_with_blocks)\(\s*(?:g\s*,\s*)?["'](?:onnx::)?([A-Za-z0-9_]+)["']""")
# Case-name stems that are not the op's snake_case name (ONNX's own test naming).
ALIASES = {
    "batchnorm": "BatchNormalization", "instancenorm": "InstanceNormalization",
    "sce": "SoftmaxCrossEntropyLoss", "nllloss": "NegativeLogLikelihoodLoss",
    "mvn": "MeanVarianceNormalization", "greater_equal": "GreaterOrEqual",
    "less_equal": "LessOrEqual", "tril": "Trilu", "triu": "Trilu",
    "training_dropout": "Dropout", "simple_rnn": "RNN", "basic_conv": "Conv",
    "basic_deform_conv": "DeformConv", "constant_pad": "Pad", "edge_pad": "Pad",
    "reflect_pad": "Pad", "wrap_pad": "Pad", "strnorm": "StringNormalizer",
    "strnormalizer": "StringNormalizer", "nesterov_momentum": "Momentum",
}
STATUS_ORDER = ("pass", "refused", "fail", "mismatch", "crash")
# onnx2tf refuses nothing by name: its "refused" cases are those feeding sequences,
# optionals or strings, left out of both columns alike.
O2T_REFUSED = "not run (sequence/optional/string data)"


# --------------------------------------------------------------------------- which ops torch emits


def torch_emitted_ops() -> tuple:
    """ONNX op types the TorchScript exporter can emit at opsets <= 17, and the files read.

    A regex over the source text of torch/onnx/symbolic_opset{7..17}.py,
    symbolic_helper.py and the other top-level torch/onnx modules (not _internal, the
    dynamo exporter): every ``g.op("Name"``/``g.op("onnx::Name"`` and
    ``add_op_with_blocks(g, "Name"`` (If, Loop) whose name is an ai.onnx op. Custom
    domains (``prim::``, ``aten::``, ``com.microsoft::``) do not match the pattern or
    are not ai.onnx op names.
    """
    import onnx
    import torch

    onnx_ops = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == ""}
    root = os.path.join(os.path.dirname(torch.__file__), "onnx")
    files = []
    for path in sorted(glob.glob(os.path.join(root, "*.py"))):
        m = re.match(r"symbolic_opset(\d+)\.py$", os.path.basename(path))
        if m and int(m.group(1)) not in TORCH_OPSETS:
            continue
        files.append(path)
    ops: Set[str] = set()
    for path in files:
        with open(path) as f:
            ops.update(n for n in _TORCH_OP_CALLS.findall(f.read()) if n in onnx_ops)
    return ops, [os.path.relpath(p, os.path.dirname(root)) for p in files], torch.__version__


# --------------------------------------------------------------------------- case -> op


def _snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    return re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s).lower()


def _stems() -> Dict[str, Set[str]]:
    import onnx
    stems: Dict[str, Set[str]] = collections.defaultdict(set)
    for schema in onnx.defs.get_all_schemas_with_history():
        for stem in (_snake(schema.name), schema.name.lower()):
            stems[stem].add(schema.name)
    for stem, name in ALIASES.items():
        stems[stem].add(name)
    return stems


def graph_ops(case: str) -> tuple:
    """(op types in the case's graph, subgraphs too; its ai.onnx opset)."""
    import onnx

    from tfx_bridge.components.pytorch_model_importer.to_tf import core
    model = onnx.load(os.path.join(conformance.node_test_root(), case, "model.onnx"))
    opset = next((o.version for o in model.opset_import if o.domain in core.ONNX_DOMAINS), 0)
    return sorted({n.op_type for n in core.iter_nodes(model.graph)}), opset


def case_op(case: str, ops: Iterable[str], stems: Dict[str, Set[str]]) -> tuple:
    """(op, how) for a case: the longest op stem its name starts with (followed by
    ``_``, a digit or the end) whose op is in the graph; an ``_expanded`` case goes to the
    op it expands (its graph holds the function body). Else the graph's only op."""
    body = case[len("test_"):]
    expanded = "_expanded" in body
    stem_of = body.split("_expanded")[0] if expanded else body
    ops = set(ops)
    best = None
    for stem, names in stems.items():
        if stem_of == stem or re.match(re.escape(stem) + r"(_|\d)", stem_of):
            for name in names:
                if (expanded or name in ops) and (best is None or len(stem) > best[0]):
                    best = (len(stem), name)
    if best:
        return best[1], "name"
    real = ops - {"Constant"}
    if len(real) == 1:
        return real.pop(), "graph"
    return "(unassigned)", "none"


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


# --------------------------------------------------------------------------- docs/OPS.md


def _pct(n: int, total: int) -> str:
    return f"{100.0 * n / total:.1f}%" if total else "-"


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join((text or "").split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _totals(rows: List[dict], key: str = "status",
            refused: str = "refused by name") -> str:
    n = len(rows)
    counts = collections.Counter(r.get(key) for r in rows)
    failing = n - counts["pass"] - counts["refused"]
    return (f"{n} cases: **{counts['pass']} passed ({_pct(counts['pass'], n)})**, "
            f"{counts['refused']} {refused} ({_pct(counts['refused'], n)}), "
            f"{failing} failing ({_pct(failing, n)}: " + ", ".join(
                f"{counts[s]} {s}" for s in ("fail", "mismatch", "crash")) + ")")


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


def write_ops_md(rows: Dict[str, dict], derivation: dict, timing: dict,
                 path: str = OPS_MD) -> None:
    torch_ops = set(derivation["ops"])
    with_o2t = [r for r in rows.values() if r["torch"] and "onnx2tf" in r]
    all_rows = [r for r in rows.values() if "status" in r]  # our column measured
    torch_rows = [r for r in all_rows if r["torch"]]
    plain = [r for r in all_rows if not r["expanded"]]
    lines = [
        "# ONNX op coverage of the importer's converter",
        "",
        "Generated by `benchmarks/onnx_conformance.py` (do not edit by hand) from",
        "`benchmarks/results/onnx_conformance.jsonl`, last written "
        f"{derivation['written']}.",
        "",
        "**What is measured.** Every case of ONNX's backend node tests shipped in the onnx "
        f"{derivation['onnx']} wheel (`onnx/backend/test/data/node`, {len(all_rows)} cases "
        "measured) is converted by `to_tf.core.convert` and saved as a SavedModel in worker "
        "children (about 50 cases each, a per-case timeout, a crashed child's chunk resumed "
        "and the crashing case rerun alone), then loaded in a *fresh* process with oneDNN "
        "off (`TF_ENABLE_ONEDNN_OPTS=0`) by `tf.saved_model.load` and run through "
        "`serving_default` on the case's `test_data_set_0` inputs; outputs are compared at "
        "ONNX's backend tolerances (rtol 1e-3, atol 1e-7; integers and bools exact; dtype "
        "and shape checked).",
        "",
        "- **pass**: equal within tolerance; **refused**: the converter refused by name "
        "(`ConversionFailed`, with the op, the variant and the fix), or the case feeds "
        "sequences, optionals or strings (plain numeric tensors only); **failing**: "
        "*fail* (a conversion or run error), *mismatch* (wrong numbers, dtype or shape), "
        "*crash* (the child process died).",
        "- **onnx2tf**: the same cases through plain onnx2tf 1.24.1, called as the importer "
        "calls it (`keep_shape_absolutely_input_names` = every input, on a copy of the "
        "model), saved and checked the same way. Outputs are compared as they come: a "
        "channel-last output where ONNX has channel-first counts as a mismatch.",
        "",
        "**Which ops torch emits.** Derived at run time from the source of torch "
        f"{derivation['torch']} (TorchScript exporter, opsets <= 17): a regex over "
        "the top-level modules of `torch/onnx` (" + ", ".join(
            f"`{os.path.basename(p)}`" for p in derivation["files"]) + "; not "
        "`symbolic_opset18+.py` nor `_internal/`, the dynamo exporter) for "
        "`g.op(\"Name\"`, `g.op(\"onnx::Name\"` and `add_op_with_blocks(g, \"Name\"` "
        "(If, Loop), keeping names that are ai.onnx ops (so `prim::`, `aten::` and custom "
        f"domains drop out): **{len(torch_ops)} ops**: "
        + ", ".join(sorted(torch_ops)) + ".",
        "",
        "**Which op a case belongs to.** Case `test_<x>...` belongs to op X when `<x>` "
        "starts with X's snake_case (or lower-case) name, followed by `_`, a digit or the "
        "end (longest match), and the case's graph contains an X node; ONNX's own "
        "shortenings are aliases (" + ", ".join(f"`{k}` {v}" for k, v in sorted(
            ALIASES.items())) + "). A case whose name matches no op goes to its graph's "
        "only op besides Constant. `*_expanded*` cases (the op's function body in other "
        "ops) count under the op they expand and are marked (x) in the failing list; "
        "totals are given with and without them.",
        "",
        "## Totals",
        "",
        f"- Torch-emitted ops, all their cases: {_totals(torch_rows)}.",
        f"- Torch-emitted ops, without `_expanded` cases: "
        f"{_totals([r for r in torch_rows if not r['expanded']])}.",
        f"- All ops, all cases: {_totals(all_rows)}.",
        f"- All ops, without `_expanded` cases: {_totals(plain)}.",
        "- Torch-emitted ops, cases whose model imports opset <= 17: "
        f"{_totals([r for r in torch_rows if r.get('opset', 99) <= 17])}; opset >= 18: "
        f"{_totals([r for r in torch_rows if r.get('opset', 0) >= 18])}.",
    ]
    if with_o2t:
        lines.append(f"- Plain onnx2tf, torch-emitted ops ({len(with_o2t)} cases measured): "
                     f"{_totals(with_o2t, 'onnx2tf', O2T_REFUSED)}.")
        other = [r for r in rows.values() if not r["torch"] and "onnx2tf" in r]
        if other:
            lines.append(f"- Plain onnx2tf, other ops: {_totals(other, 'onnx2tf', O2T_REFUSED)}.")
    if timing:
        lines += ["", "Runtime of each column's last full run (the shared 2-core dev machine, "
                         "2 jobs): " + "; ".join(
            f"{k} {v}" for k, v in timing.items()) + "."]
    lines += ["", "## Per op", "",
              "| op | torch emits it | cases (expanded) | passed | refused | failing "
              "| onnx2tf passed |", "|---|---|---|---|---|---|---|"]
    by_op: Dict[str, List[dict]] = collections.defaultdict(list)
    for r in all_rows:
        by_op[r["op"]].append(r)
    for op_name in sorted(by_op, key=lambda o: (o not in torch_ops, o.lower())):
        group = by_op[op_name]
        c = collections.Counter(r["status"] for r in group)
        n_exp = sum(r["expanded"] for r in group)
        o2t = [r for r in group if "onnx2tf" in r]
        o2t_text = (f"{sum(r['onnx2tf'] == 'pass' for r in o2t)}/{len(o2t)}" if o2t else "-")
        failing = len(group) - c["pass"] - c["refused"]
        lines.append(f"| {op_name} | {'yes' if op_name in torch_ops else 'no'} | "
                     f"{len(group)}" + (f" ({n_exp})" if n_exp else "") + f" | {c['pass']} | "
                     f"{c['refused']} | {failing} | {o2t_text} |")
    bad = sorted((r for r in all_rows if r["status"] not in ("pass", "refused")),
                 key=lambda r: (not r["torch"], r["op"].lower(), r["case"]))
    lines += ["", f"## Failing cases ({len(bad)})", "",
              "(x) marks an `_expanded` case; torch-emitted ops first. Two kinds are "
              "differences by design, not conversion errors:",
              "",
              "- Bernoulli (and its expansion through RandomUniformLike): a random op; the "
              "case's expected output is one draw of ONNX's generator. Shape and dtype "
              "match; the values cannot.",
              "- float32 -> bfloat16 Cast/CastLike: ONNX's reference and these cases "
              "truncate; the converter rounds to nearest even, as PyTorch, onnxruntime "
              "and ml_dtypes do (the spec text does not say), so a PyTorch model's "
              "`.to(torch.bfloat16)` is served as PyTorch computes it. The cases differ "
              "by one bfloat16 step on some values.",
              ""]
    for r in bad:
        lines.append(f"- `{r['case']}`{' (x)' if r['expanded'] else ''} [{r['op']}] "
                     f"{r['status']}: {_one_line(r.get('detail', ''))}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


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
    stems = _stems()
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
            timing["ours"] = f"{time.perf_counter() - start:.0f} s ({len(names)} cases)"
            for name, r in ours.items():
                fresh[name].update(status=r["status"], detail=r["detail"],
                                   convert_s=r["convert_s"])
        if args.onnx2tf or args.onnx2tf_all:
            todo = [n for n in names if args.onnx2tf_all or fresh[n]["torch"]]
            start = time.perf_counter()
            theirs = run_column("onnx2tf", todo, args.jobs, work)
            timing["plain onnx2tf"] = f"{time.perf_counter() - start:.0f} s ({len(todo)} cases)"
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
    print("torch-emitted ops: " + _totals([r for r in ours if r["torch"]]), file=sys.stderr)
    print("all ops: " + _totals(ours), file=sys.stderr)
    theirs = [r for r in rows.values() if "onnx2tf" in r and r["torch"]]
    if theirs:
        print("plain onnx2tf, torch-emitted ops: " + _totals(theirs, "onnx2tf", O2T_REFUSED),
              file=sys.stderr)
    print(f"wrote {os.path.relpath(RESULTS)} and {os.path.relpath(OPS_MD)}", file=sys.stderr)


if __name__ == "__main__":
    main()
