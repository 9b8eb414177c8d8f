"""Conversion benchmark: the importer against plain onnx2tf, on the zoo and the reference models.

For each model of the importer's test zoo (tests/components/pytorch_model_importer/zoo.py:
torchvision, torch.nn, HF transformers and the recommender shapes) and each
reference model in tfx_bridge.pipelines.demo_models:

- PyTorchModelImporter: the rewrites it applied, export + convert seconds, and
  the largest float error against torch and onnxruntime at batch 1, 7 and 32
  (integer outputs must match exactly);
- plain onnx2tf: what a user gets by hand, ``torch.onnx.export`` (eval,
  no_grad, dynamic batch, opset 17) then the ``onnx2tf -osd`` defaults, checked
  against onnxruntime at the same batch sizes (inputs of rank 3 and more fed
  channels-last, as onnx2tf's defaults make them, outputs moved back).
  "converted" means equivalent at all three sizes.

Figures go into docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/import_models.py [--json] [--only NAME ...]

``--catalog`` runs whole catalogs instead of the zoo (benchmarks/catalog.py:
every torchvision classification and segmentation builder, every
transformers text architecture from a tiny config, and nets written with
torch.nn), each model in a child process (a crash or a timeout is a recorded
row), every hand-over form asked for, one JSON line per model, form and
converter in benchmarks/results/catalog.jsonl (rows already there are
skipped: the run resumes). ``--summary`` prints the totals as Markdown.

    nice -n 15 .venv/bin/python benchmarks/import_models.py --catalog \
        [--family torchvision,transformers,torch_nn] [--only NAME ...] \
        [--forms state_dict,torchscript,onnx] [--onnx2tf] [--jobs N] [--out FILE]
    .venv/bin/python benchmarks/import_models.py --catalog --summary [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import convert, signature  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.errors import ImporterError  # noqa: E402
from tfx_bridge.errors import short_message  # noqa: E402
from tfx_bridge.pipelines import demo_models  # noqa: E402

ZOO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests",
                       "components", "pytorch_model_importer")
sys.path.insert(0, os.path.abspath(ZOO_DIR))
import zoo  # noqa: E402

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:  # catalog:Class module classes of the catalog's hand-overs
    sys.path.insert(0, BENCH_DIR)

BATCHES = (1, 7, 32)


def _models():
    """name -> (category, builder, inputs, outputs, hand_over(folder) -> ModelSource)."""
    out = {}
    for name, entry in zoo.ZOO.items():
        out[name] = (entry.category, entry.build, entry.inputs, entry.outputs,
                     lambda folder, n=name: zoo.hand_over(n, folder))
    for name, (cls, kwargs, inputs, outputs) in demo_models.REFERENCE_MODELS.items():
        def source(folder, n=name, c=cls, k=kwargs):
            path = os.path.join(folder, f"{n}.pt")
            torch.save(demo_models.build(n).state_dict(), path)
            return convert.ModelSource("state_dict", path,
                                       f"tfx_bridge.pipelines.demo_models:{c.__name__}", k)
        out[f"ref_{name}"] = (f"reference ({cls.__name__})",
                              lambda n=name: demo_models.build(n), inputs, outputs, source)
    return out


def _plain(build, inputs, outputs, work) -> str:
    """What plain torch.onnx.export + onnx2tf defaults give: a verdict string."""
    import onnxruntime as ort
    import tensorflow as tf

    specs = signature.parse_input_specs(inputs)
    sample = tuple(torch.from_numpy(v) for v in signature.make_inputs(specs, 2).values())
    onnx_path = os.path.join(work, "plain.onnx")
    try:
        with torch.no_grad():
            torch.onnx.export(build(), sample, onnx_path, input_names=[s.name for s in specs],
                              output_names=outputs, opset_version=17, dynamo=False,
                              dynamic_axes={n: {0: "batch"}
                                            for n in [s.name for s in specs] + outputs})
    except Exception as e:
        return f"export fails ({short_message(e)[:80]})"
    out_dir = os.path.join(work, "plain_tf")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep
               + os.environ.get("PATH", ""))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "onnx2tf"), "-i",
                           onnx_path, "-o", out_dir, "-osd", "-n"], capture_output=True,
                          text=True, env=env, cwd=work, timeout=1800)
    if not os.path.exists(os.path.join(out_dir, "saved_model.pb")):
        text = (proc.stdout + proc.stderr).strip().splitlines()
        reason = next((ln for ln in reversed(text) if "Error" in ln or "error" in ln),
                      text[-1] if text else "no output")
        return f"conversion fails ({reason.strip()[:80]})"
    fn = tf.saved_model.load(out_dir).signatures["serving_default"]
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    keys = sorted(fn.structured_outputs, key=lambda k: int("".join(c for c in k if c.isdigit())
                                                             or 0))
    for batch in BATCHES:
        feeds = signature.make_inputs(specs, batch)
        want = session.run(None, feeds)
        tf_feeds = {}
        for name, spec in fn.structured_input_signature[1].items():
            value = feeds[name]
            if value.ndim >= 3 and tuple(spec.shape[1:]) != value.shape[1:]:
                value = np.moveaxis(value, 1, -1)  # onnx2tf's default channels-last input
            tf_feeds[name] = tf.constant(value)
        try:
            got = fn(**tf_feeds)
        except Exception as e:
            return f"crashes at batch {batch} ({short_message(e)[:70]})"
        for ref, key in zip(want, keys, strict=False):
            value = got[key].numpy()
            if value.shape != ref.shape and value.ndim >= 3:
                value = np.moveaxis(value, -1, 1)
            if value.shape != ref.shape or not np.allclose(value, ref, atol=1e-4):
                return f"wrong at batch {batch}"
    return "converted"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--catalog", action="store_true",
                        help="whole catalogs (benchmarks/catalog.py) instead of the zoo")
    parser.add_argument("--family", default="torch_nn,transformers,torchvision",
                        help="comma-separated catalog families, run in this order")
    parser.add_argument("--forms", default="state_dict",
                        help="comma-separated hand-over forms: state_dict,torchscript,onnx")
    parser.add_argument("--converter", default="auto",
                        help="converter= for the importer's column (auto, tfx-bridge)")
    parser.add_argument("--onnx2tf", action="store_true",
                        help="also the converter='onnx2tf' column (after the importer's)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=CHILD_TIMEOUT_S,
                        help="seconds per model and form (a timeout is a recorded row)")
    parser.add_argument("--out", default=CATALOG_JSONL)
    parser.add_argument("--summary", action="store_true",
                        help="print the totals of --out as Markdown (runs nothing)")
    parser.add_argument("--catalog-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.catalog_child:
        _catalog_child(json.loads(args.catalog_child))
        return
    if args.catalog:
        if args.summary:
            print(catalog_summary(_read_rows(args.out)))
        else:
            run_catalog(args)
        return
    rows = []
    for name, (category, build, inputs, outputs, source) in _models().items():
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            specs = signature.parse_input_specs(inputs)
            start = time.perf_counter()
            try:
                result = convert.import_model(source(tmp), specs, outputs,
                                              os.path.join(tmp, "model"))
                report = result.report
                verdict = "yes" if result.blessed else "NO"
            except Exception as e:
                report, verdict = None, f"fails: {short_message(e)[:80]}"
            row = {"model": name, "category": category, "blessed": verdict,
                   "seconds": round(time.perf_counter() - start, 1)}
            if report is not None:
                row["rewrites"] = [r["kind"] for r in report["rewrites"]]
                row["convert_s"] = report["seconds"]["convert"]
                for ref in ("torch", "onnxruntime"):
                    row[ref] = {b: max((c["max_abs"] for c in report["checks"]
                                        if c["reference"] == ref and c["batch"] == b
                                        and c["max_abs"] is not None
                                        and not c["dtype"].startswith(("int", "bool"))),
                                       default=None) for b in BATCHES}
            with tempfile.TemporaryDirectory() as work:
                row["plain_onnx2tf"] = _plain(build, inputs, outputs, work)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)

    def errs(row, ref):
        values = row.get(ref) or {}
        return " / ".join("-" if values.get(b) is None else f"{values[b]:.1g}" for b in BATCHES)

    print("| model | category | rewrites applied | convert s | max abs vs torch (1 / 7 / 32) "
          "| max abs vs ORT (1 / 7 / 32) | importer: equivalent | plain onnx2tf defaults |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['category']} | {', '.join(r.get('rewrites', [])) or '-'} | "
              f"{r.get('convert_s', '-')} | {errs(r, 'torch')} | {errs(r, 'onnxruntime')} | "
              f"{r['blessed']} | {r['plain_onnx2tf']} |")
    if args.json:
        print(json.dumps(rows, sort_keys=True))


# =========================================================================== catalog

CATALOG_FAMILIES = ("torchvision", "transformers", "torch_nn")
CATALOG_FORMS = ("state_dict", "torchscript", "onnx")
CATALOG_JSONL = os.path.join(BENCH_DIR, "results", "catalog.jsonl")
CHILD_TIMEOUT_S = 600
# Rows about the model itself, not one conversion.
MODEL_LEVEL = ("skipped", "not_built", "excluded")
_OP_NODE = re.compile(r"ONNX op (\S+) \(node ([^,)]+)")


def _read_rows(path: str) -> list:
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


def _importer_takes_converter() -> bool:
    import inspect

    return "converter" in inspect.signature(convert.import_model).parameters


def _torch_self_drift(module, specs, batch: int = 7):
    """Max |torch(batch) - torch(row by row)| over the first output, or None."""
    import numpy as np
    import torch

    try:
        feeds = signature.make_inputs(specs, batch)
        args = [torch.from_numpy(feeds[s.name]) for s in specs]
        with torch.no_grad():
            whole = module(*args)
            whole = whole[0] if isinstance(whole, (tuple, list)) else whole
            rows = []
            for i in range(batch):
                one = module(*[a[i:i + 1] for a in args])
                rows.append(one[0] if isinstance(one, (tuple, list)) else one)
        return float(np.max(np.abs(whole.numpy() - torch.cat(rows).numpy())))
    except Exception:  # noqa: BLE001 (a model that cannot run row by row: no figure)
        return None


def _float64_errors(module, specs, serving_dir: str, outputs, fp32, batch: int = 32) -> dict:
    """Max abs error against torch run in float64, of torch in float32 (``fp32``, the
    first output at ``batch``: ``torch_fp32_error``) and of the SavedModel
    (``savedmodel_fp64_error``); {} when the model does not run in float64."""
    import copy

    import numpy as np
    import tensorflow as tf
    import torch

    feeds = signature.make_inputs(specs, batch)
    args = [torch.from_numpy(feeds[s.name]) for s in specs]
    try:
        with torch.no_grad():
            wide = copy.deepcopy(module).double()
            fp64 = wide(*[a.double() if a.is_floating_point() else a for a in args])
        fp64 = (fp64[0] if isinstance(fp64, (tuple, list)) else fp64).numpy()
        serve = tf.saved_model.load(serving_dir).signatures["serving_default"]
        ours = serve(**{k: tf.constant(v) for k, v in feeds.items()})[outputs[0]].numpy()
    except Exception:  # noqa: BLE001 (no float64 figure for this model)
        return {}
    return {"torch_fp32_error": float(np.max(np.abs(fp32 - fp64))),
            "savedmodel_fp64_error": float(np.max(np.abs(ours.astype(np.float64) - fp64)))}


def _op_node(message: str):
    m = _OP_NODE.search(message or "")
    return (m.group(1), m.group(2)) if m else (None, None)


def _catalog_child(task: dict) -> None:
    """One model, one hand-over form, one converter; writes the row to task["result"]."""
    import inspect

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
    specs = signature.parse_input_specs(built.inputs)
    row.update(input_size=built.input_size, inputs=built.inputs, outputs=built.outputs,
               params=built.params, module_class=built.module_class,
               module_kwargs=built.module_kwargs)
    if task["family"] == "torchvision":
        row["size"] = int(built.input_size.split("x")[-1])
        row["calibration"] = catalog.CALIBRATION
        row["size_rule"] = catalog.SIZE_RULE
    # Tolerance: 1e-4 absolute, or relative to the output's scale when that is above 1.
    try:
        with torch.no_grad():
            ref = convert.run_torch(built.module, signature.make_inputs(specs, max(BATCHES)),
                                    specs)
    except Exception as e:  # noqa: BLE001 (torch itself cannot run it: not a converter row)
        # e.g. RecurrentGemma keeps its recurrent state, sized by the first call's batch.
        return done(status="not_built", message=f"torch's own forward fails at batch "
                    f"{max(BATCHES)} after the builder's check call: {type(e).__name__}: "
                    f"{short_message(e)[:300]}")
    floats = [np.abs(r).max() for r in ref if np.issubdtype(r.dtype, np.floating) and r.size]
    scale = float(max(floats)) if floats else 0.0
    if not np.isfinite(scale):
        return done(status="not_built", message="torch's own output is not finite")
    atol = 1e-4 * max(1.0, scale)
    row.update(output_scale=scale, atol=atol)
    with tempfile.TemporaryDirectory(prefix="catalog-") as tmp:
        try:
            source = catalog.hand_over(built, task["form"], tmp, task["model"])
        except Exception as e:  # noqa: BLE001 (the user's own export/trace fails)
            return done(status="handover_failed",
                        message=f"{type(e).__name__}: {short_message(e)[:400]}")
        kwargs = {"atol": atol}
        if "converter" in inspect.signature(convert.import_model).parameters:
            kwargs["converter"] = task["converter"]
        elif task["converter"] != "onnx2tf":
            row["note"] = "importer without converter=: onnx2tf"
        try:
            result = convert.import_model(source, specs, built.outputs,
                                          os.path.join(tmp, "model"), **kwargs)
            fp64_errors = ({} if result.blessed else
                           _float64_errors(built.module, specs, result.serving_dir,
                                           built.outputs, ref[0], max(BATCHES)))
        except ImporterError as e:
            message = short_message(e)
            op, node = _op_node(message)
            return done(status="refused", error_type=type(e).__name__, message=message[:1500],
                        op=op, node=node)
        except Exception as e:  # noqa: BLE001 (an importer bug: recorded, not fatal)
            import traceback

            message = f"{type(e).__name__}: {short_message(e)}"
            op, node = _op_node(message)
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
                            "op": _op_node(a.get("message") or "")[0]} for a in refusals]
    status = "verified" if result.blessed else "not_equivalent"
    first = None  # the first export finding onnxruntime named a node for
    if not result.blessed and report.get("export_check"):
        # onnxruntime on the exported ONNX already differs from torch: the export's fault,
        # named by node and module where onnxruntime raised (import report's likely cause).
        from tfx_bridge.components.pytorch_model_importer import report as import_report

        first = next((f for f in report["export_check"] if f.get("node")), None)
        row.update(export_check=report["export_check"][:6],
                   export_cause=import_report.likely_cause(report)[:1500],
                   node=first["node"] if first else None)
    if not result.blessed:
        # A model whose float32 reference is itself off by more than the tolerance
        # cannot check any float32 converter at that tolerance: torch's outputs at
        # batch B against the same rows run one at a time, and against torch in
        # float64 (the exact math, up to float64 rounding). Such a model is recorded
        # apart, with both figures and the SavedModel's own error against float64.
        drift = _torch_self_drift(built.module, specs)
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
         op=first["op"] if first else _op_node(message or "")[0])


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
    rows = _read_rows(args.out)
    done = {(r["family"], r["model"], r["form"], r["converter_requested"]) for r in rows}
    model_level = {(r["family"], r["model"]) for r in rows if r["status"] in MODEL_LEVEL}
    sizes = {(r["family"], r["model"]): r["size"] for r in rows if r.get("size")}
    tasks = [t for t in _catalog_tasks(args)
             if (t["family"], t["model"], t["form"], t["converter"]) not in done
             and (t["family"], t["model"]) not in model_level]
    if args.converter != "onnx2tf" and not _importer_takes_converter():
        print("warning: convert.import_model has no converter= yet: every column is onnx2tf",
              file=sys.stderr, flush=True)
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
                    [sys.executable, os.path.abspath(__file__), "--catalog-child",
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
    print(catalog_summary(_read_rows(args.out)))


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
            op = r.get("op") or _op_node(r.get("message") or "")[0]
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
            op = _op_node(m)[0] or "-"
            variant = m.split("): ", 1)[1][:120] if "): " in m else m[:120]
            ours[(op, variant)].append(f"{r['model']} ({r['form']})")
    if ours:
        out += ["", "### tfx-bridge converter refusals by ONNX op (auto then fell back or "
                "refused)", ""]
        for (op, variant), where in sorted(ours.items(), key=lambda kv: -len(kv[1]))[:40]:
            out.append(f"- {op} x{len(where)}: {variant} (e.g. {', '.join(where[:4])})")
    skipped = [r for r in rows if r["status"] in ("skipped", "not_built")]
    if skipped:
        out += ["", "### Skipped and not built", ""]
        out += [f"- {r['family']} {r['model']}: {r['status']}: {_reason(r)}"
                for r in sorted(skipped, key=lambda r: (r["family"], r["model"]))]
    return "\n".join(out)


if __name__ == "__main__":
    main()
