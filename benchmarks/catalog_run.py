"""The catalog run of ``import_models.py --catalog``: the tasks (model, hand-over
form, converter) of the families asked for, the cheap model-level precheck in the
runner's own process, each other task in a child process (``import_models.py
--catalog-child TASK``, whose :func:`catalog_child` builds the model, hands it
over and imports it), one JSON row per task appended to the results file.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from catalog_base import NotBuilt, varying_reference
from catalog_reference import (
    BATCHES,
    FLOOR_CAP,
    batch_bound,
    float32_floor,
    float64_errors,
    torch_self_drift,
)
from catalog_summary import (
    CATALOG_FAMILIES,
    CATALOG_FORMS,
    MODEL_LEVEL,
    catalog_summary,
    op_node,
    read_rows,
)

from tfx_bridge.components.pytorch_model_importer import convert, signature
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
from tfx_bridge.components.pytorch_model_importer.errors import ImporterError
from tfx_bridge.components.pytorch_model_importer.verify import run_torch
from tfx_bridge.errors import short_message

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
# What each task's child process runs: import_models.py --catalog-child TASK.
IMPORT_MODELS = os.path.join(BENCH_DIR, "import_models.py")
CATALOG_JSONL = os.path.join(BENCH_DIR, "results", "catalog.jsonl")
CHILD_TIMEOUT_S = 600


def catalog_child(task: dict) -> None:
    """One model, one hand-over form, one converter; writes the row to task["result"]."""
    import catalog

    row = {k: task[k] for k in ("family", "model", "form")}
    row["converter_requested"] = task["converter"]
    start = time.perf_counter()

    def done(**fields):
        row.update(fields)
        row["wall_s"] = round(time.perf_counter() - start, 1)
        with open(task["result"], "w", encoding="utf-8") as f:
            json.dump(row, f, sort_keys=True)

    try:
        built = catalog.build(task["family"], task["model"], task.get("size"))
    except catalog.Skipped as e:
        return done(status="skipped", form="-", converter_requested="-", message=str(e))
    except catalog.Excluded as e:
        return done(status="excluded", form="-", converter_requested="-", message=str(e))
    except catalog.NotBuilt as e:
        return done(status="not_built", form="-", converter_requested="-", message=str(e))
    except Exception as e:  # noqa: BLE001 (a builder that breaks is not a converter failure)
        return done(status="not_built", form="-", converter_requested="-",
                    message=f"{type(e).__name__}: {short_message(e)[:300]}")
    if task["family"] == "detection":
        return _detection_child(task, built, row, done)
    specs = signature.parse_input_specs(built.inputs)
    row.update(input_size=built.input_size, inputs=built.inputs, outputs=built.outputs,
               params=built.params, module_class=built.module_class,
               module_kwargs=built.module_kwargs)
    if task["family"] == "torchvision":
        row.update(size=int(built.input_size.split("x")[-1]),
                   calibration=catalog.CALIBRATION, size_rule=catalog.SIZE_RULE)
    # Tolerance: 1e-4 absolute, or relative to the output's scale when that is above 1.
    try:
        with torch.no_grad():
            ref, filled = varying_reference(built.module, lambda: run_torch(
                built.module, signature.make_inputs(specs, max(BATCHES)), specs))
    except NotBuilt as e:
        return done(status="not_built", message=str(e))
    except Exception as e:  # noqa: BLE001 (torch itself cannot run it: not a converter row)
        # e.g. RecurrentGemma keeps its recurrent state, sized by the first call's batch.
        return done(status="not_built", message=f"torch's own forward fails at batch "
                    f"{max(BATCHES)} after the builder's check call: {type(e).__name__}: "
                    f"{short_message(e)[:300]}")
    row.update({"weights": f"drawn from N(0, 0.02), zero before: {', '.join(filled)}"[:300]}
               if filled else {})
    floats = [np.abs(r).max() for r in ref if np.issubdtype(r.dtype, np.floating) and r.size]
    scale = float(max(floats)) if floats else 0.0
    if not np.isfinite(scale):
        return done(status="not_built", message="torch's own output is not finite")
    atol = 1e-4 * max(1.0, scale)
    # No float32 converter can be checked closer than torch's own float32 rounding: twice
    # its error against float64 (both sides within it of the exact math), where that is
    # wider, and the model's float32 rounding stays below FLOOR_CAP of the output's scale.
    floor = float32_floor(built.module, specs)
    if floor is not None and atol < 2 * floor <= FLOOR_CAP * max(1.0, scale):
        atol = 2 * floor
        row.update(atol_from=f"2 x torch float32's own error against float64 ({floor:.3g})")
    row.update(output_scale=scale, atol=atol, torch_fp32_floor=floor)
    with tempfile.TemporaryDirectory(prefix="catalog-") as tmp:
        source, failed = _handed_over(catalog.hand_over, built, task, tmp)
        if failed:
            return done(**failed)
        bound = batch_bound(source, specs)
        if bound:
            return done(status="handover_failed", message=bound)
        config = ImporterConfig.of_source(source, built.inputs, built.outputs, atol=atol,
                                          converter=task["converter"])
        try:
            result = convert.import_model(config, os.path.join(tmp, "model"))
            fp64_errors = ({} if result.blessed else
                           float64_errors(built.module, specs, result.serving_dir,
                                           built.outputs, ref[0], max(BATCHES)))
        except ImporterError as e:
            # Our own refusal: one line, whole (what, where, cause and fix), not the
            # first 300 characters a foreign error is cut to.
            message = f"{type(e).__name__}: {' '.join(str(e).split())}"
            op, node = op_node(message)
            return done(status="refused", error_type=type(e).__name__, message=message[:1500],
                        op=op, node=node)
        except Exception as e:  # noqa: BLE001 (an importer bug: recorded, not fatal)
            import traceback

            message = f"{type(e).__name__}: {short_message(e)}"
            op, node = op_node(message)
            frames = traceback.extract_tb(e.__traceback__)
            ours = [f for f in frames if "pytorch_model_importer" in f.filename]

            def at(f):
                return f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"

            return done(status="error", error_type=type(e).__name__, message=message[:1500],
                        op=op, node=node, where=at(frames[-1]),
                        importer_frame=at(ours[-1]) if ours else None)
    report = result.report
    checks = report["checks"]
    errors = {}
    for ref_name in ("torch", "onnxruntime"):
        per = {}
        for b in BATCHES:
            values = [c["max_abs"] for c in checks if c["reference"] == ref_name
                      and c["batch"] == b and c["max_abs"] is not None]
            per[str(b)] = max(values) if values else None
        errors[ref_name] = per
    bad = [c for c in checks if not c["ok"]]
    message = None
    if bad:
        c = bad[0]
        message = (f"{c['reference']} batch {c['batch']} output {c['output']}: "
                   + (c.get("error") or f"max abs {c['max_abs']:.3g} > atol {atol:.3g} "
                                         f"({c['mismatches']} mismatches)"))
    # What auto's first choice (ours) said before onnx2tf took over: what to fix in ours.
    refusals = [a for a in report.get("conversion_attempts") or []
                if a.get("outcome") != "converted"]
    if refusals:
        row["attempts"] = [{"converter": a.get("converter"), "outcome": a.get("outcome"),
                            "message": (a.get("message") or "")[:1500],
                            "op": op_node(a.get("message") or "")[0]} for a in refusals]
    status = "verified" if result.blessed else "not_equivalent"
    first = None  # the first export finding onnxruntime named a node for
    draws = report.get("random_draws")
    if not result.blessed and draws:
        # The model samples in its forward: the drawing node, op and module, and the fix.
        from tfx_bridge.components.pytorch_model_importer import report as import_report

        first = {"op": draws["op"], "node": draws["node"]}
        row.update(random_draws=draws, node=draws["node"],
                   export_cause=import_report.likely_cause(report)[:1500])
    elif not result.blessed and report.get("export_check"):
        # onnxruntime on the exported ONNX already differs from torch: the export's fault,
        # named by node and module where onnxruntime raised (import report's likely cause).
        from tfx_bridge.components.pytorch_model_importer import report as import_report

        first = next((f for f in report["export_check"] if f.get("node")
                      and "NOT_IMPLEMENTED" not in (f.get("error") or "")), None)
        row.update(export_check=report["export_check"][:6],
                   export_cause=import_report.likely_cause(report)[:1500],
                   node=first["node"] if first else None)
    elif not result.blessed:
        # An ONNX hand-over onnxruntime cannot run: the node it names, and why.
        from tfx_bridge.components.pytorch_model_importer import report as import_report
        from tfx_bridge.components.pytorch_model_importer.verify import ort_node

        cause = import_report.likely_cause(report)
        op, node = ort_node(message or "")
        first = {"op": op, "node": node} if node else None
        row.update(export_cause=cause[:1500] if cause else None, node=node)
    if not result.blessed:
        # A model whose float32 reference is itself off by more than the tolerance
        # cannot check any float32 converter at that tolerance: torch's outputs at
        # batch B against the same rows run one at a time, and against torch in
        # float64 (the exact math, up to float64 rounding). Such a model is recorded
        # apart, with both figures and the SavedModel's own error against float64.
        drift = torch_self_drift(built.module, specs)
        row["torch_self_drift"] = drift
        row.update(fp64_errors)
        fp32 = row.get("torch_fp32_error")
        if (drift is not None and drift > atol) or (fp32 is not None and fp32 > atol):
            status = "unstable_reference"
    done(status=status,
         converter=report.get("converter", "onnx2tf"),
         rewrites=[r["kind"] for r in report.get("rewrites", [])],
         seconds=report.get("seconds"), max_abs_error=report.get("max_abs_error"),
         errors=errors, message=message,
         op=first["op"] if first else op_node(message or "")[0])


def _handed_over(hand_over, built, task: dict, folder: str):
    """(the ModelSource ``hand_over`` writes, None), or (None, the handover_failed row's
    fields) when the user's own export, trace or script fails."""
    try:
        return hand_over(built, task["form"], folder, task["model"]), None
    except Exception as e:  # noqa: BLE001 (recorded as the row)
        return None, {"status": "handover_failed",
                      "message": f"{type(e).__name__}: {short_message(e)[:400]}"}


def _detection_child(task: dict, built, row: dict, done) -> None:
    """A detector's row: handed over, imported with task="detection", checked image by
    image (catalog_detection.py)."""
    import catalog_detection

    row.update(params=built.params, module_class=built.module_class,
               module_kwargs=built.module_kwargs)
    with tempfile.TemporaryDirectory(prefix="catalog-") as tmp:
        source, failed = _handed_over(catalog_detection.hand_over, built, task, tmp)
        if failed:
            return done(**failed)
        try:
            fields = catalog_detection.import_row(built, source, tmp)
        except ImporterError as e:
            # Our own refusal: one line, whole (what, where, cause and fix), not the
            # first 300 characters a foreign error is cut to.
            message = f"{type(e).__name__}: {' '.join(str(e).split())}"
            op, node = op_node(message)
            return done(status="refused", error_type=type(e).__name__,
                        message=message[:1500], op=op, node=node)
        except Exception as e:  # noqa: BLE001 (an importer bug: recorded, not fatal)
            return done(status="error", error_type=type(e).__name__,
                        message=f"{type(e).__name__}: {short_message(e)[:1500]}")
    done(**fields)


def _catalog_tasks(args) -> list:
    import catalog

    families = [f for f in args.family.split(",") if f]
    forms = [f for f in args.forms.split(",") if f]
    for f in families:
        if f not in CATALOG_FAMILIES:
            raise SystemExit(f"--family {f}: use {', '.join(CATALOG_FAMILIES)}")
    for f in forms:
        if f not in CATALOG_FORMS:
            raise SystemExit(f"--forms {f}: use {', '.join(CATALOG_FORMS)}")
    converters = [args.converter] + (["onnx2tf"] if args.onnx2tf
                                     and args.converter != "onnx2tf" else [])
    names = {f: catalog.names(f) for f in families}
    tasks = []
    for conv in converters:  # the importer's column first, then plain onnx2tf's
        for form in forms:
            for family in families:
                for name in names[family]:
                    if args.only and name not in args.only:
                        continue
                    tasks.append({"family": family, "model": name, "form": form,
                                  "converter": conv})
    return tasks


def _precheck_row(task: dict):
    """The model-level row (excluded, skipped, not built) the runner's own process finds
    without building the model, or None: saves a child process per such model."""
    import catalog

    status = None
    try:
        catalog.precheck(task["family"], task["model"])
    except catalog.Excluded as e:
        status, message = "excluded", str(e)
    except catalog.Skipped as e:
        status, message = "skipped", str(e)
    except catalog.NotBuilt as e:
        status, message = "not_built", str(e)
    except Exception:  # noqa: BLE001 (the child builds it and records what happens)
        return None
    if status is None:
        return None
    return {"family": task["family"], "model": task["model"], "form": "-",
            "converter_requested": "-", "status": status, "message": message,
            "child_wall_s": 0.0}


def run_catalog(args) -> None:
    import concurrent.futures
    import signal
    import threading

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    rows = read_rows(args.out)
    done = {(r["family"], r["model"], r["form"], r["converter_requested"]) for r in rows}
    model_level = {(r["family"], r["model"]) for r in rows if r["status"] in MODEL_LEVEL}
    sizes = {(r["family"], r["model"]): r["size"] for r in rows if r.get("size")}
    tasks = [t for t in _catalog_tasks(args)
             if (t["family"], t["model"], t["form"], t["converter"]) not in done
             and (t["family"], t["model"]) not in model_level]
    total = len(tasks)
    print(f"catalog: {total} conversions to run ({len(done)} rows already in {args.out})",
          file=sys.stderr, flush=True)
    lock = threading.Lock()
    counter = [0]
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([BENCH_DIR] + [p for p in
                                           os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                           if p]))

    def run_one(task):
        key = (task["family"], task["model"])
        with lock:
            if key in model_level:
                return
            if key in sizes:
                task["size"] = sizes[key]
        row = _precheck_row(task)
        if row is not None:
            with lock:
                if key in model_level:
                    return
                model_level.add(key)
                with open(args.out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row, sort_keys=True) + "\n")
                counter[0] += 1
                print(f"[{counter[0]}/{total}] {task['family']} {task['model']}: "
                      f"{row['status']} - {row['message'][:160]}", file=sys.stderr, flush=True)
            return
        with tempfile.TemporaryDirectory(prefix="catalog-task-") as tmp:
            task["result"] = os.path.join(tmp, "row.json")
            log_path = os.path.join(tmp, "child.log")
            start = time.perf_counter()
            with open(log_path, "w") as log:
                proc = subprocess.Popen(
                    [sys.executable, IMPORT_MODELS, "--catalog-child",
                     json.dumps(task)], stdout=log, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True)
                try:
                    rc = proc.wait(timeout=args.timeout)
                    timed_out = False
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    rc, timed_out = proc.returncode, True
            wall = round(time.perf_counter() - start, 1)
            if os.path.exists(task["result"]) and not timed_out:
                with open(task["result"], encoding="utf-8") as f:
                    row = json.load(f)
            else:
                with open(log_path, errors="replace") as f:
                    lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
                last = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln),
                            lines[-1] if lines else "(no output)")
                row = {"family": task["family"], "model": task["model"], "form": task["form"],
                       "converter_requested": task["converter"],
                       "status": "timeout" if timed_out else "crash",
                       "message": (f"no result after {args.timeout} s" if timed_out
                                   else f"child exit {rc}: {last[:400]}")}
            row["child_wall_s"] = wall
        with lock:
            if row["status"] in MODEL_LEVEL:
                if key in model_level:
                    return
                model_level.add(key)
            if row.get("size"):
                sizes[key] = row["size"]
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")
            counter[0] += 1
            print(f"[{counter[0]}/{total}] {task['family']} {task['model']} {row['form']} "
                  f"{row['converter_requested']}: {row['status']} ({wall} s)"
                  + (f" - {row['message'][:160]}" if row.get("message") else ""),
                  file=sys.stderr, flush=True)

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for future in [pool.submit(run_one, t) for t in tasks]:
            future.result()
    print(catalog_summary(read_rows(args.out)))
