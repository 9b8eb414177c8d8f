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
every torchvision classification, segmentation and video builder, every
transformers text architecture from a tiny config, transformers' vision,
audio and dual-encoder models, and nets written with torch.nn), each model
in a child process (a crash or a timeout is a recorded row), every hand-over
form asked for, one JSON line per model, form and converter in
benchmarks/results/catalog.jsonl (rows already there are skipped: the run
resumes). ``--summary`` prints the totals as Markdown.

    nice -n 15 .venv/bin/python benchmarks/import_models.py --catalog \
        [--family torchvision,transformers,transformers_media,torch_nn] [--only NAME ...] \
        [--forms state_dict,torchscript,onnx] [--onnx2tf] [--jobs N] [--out FILE]
    .venv/bin/python benchmarks/import_models.py --catalog --summary [--out FILE]

The catalog runner and its child are in catalog_run.py, the Markdown totals in
catalog_summary.py.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import convert, signature  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig  # noqa: E402
from tfx_bridge.errors import short_message  # noqa: E402
from tfx_bridge.pipelines import demo_models  # noqa: E402

ZOO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests",
                       "components", "pytorch_model_importer")
sys.path.insert(0, os.path.abspath(ZOO_DIR))
import zoo  # noqa: E402

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:  # catalog:Class module classes of the catalog's hand-overs
    sys.path.insert(0, BENCH_DIR)

import reference_models  # noqa: E402
from catalog_run import (  # noqa: E402
    BATCHES,
    CATALOG_JSONL,
    CHILD_TIMEOUT_S,
    catalog_child,
    run_catalog,
)
from catalog_summary import catalog_summary, read_rows  # noqa: E402


def _models():
    """name -> (category, builder, inputs, outputs, hand_over(folder) -> ModelSource)."""
    out = {}
    for name, entry in zoo.ZOO.items():
        out[name] = (entry.category, entry.build, entry.inputs, entry.outputs,
                     lambda folder, n=name: zoo.hand_over(n, folder))
    for name, (cls, _, inputs, outputs) in demo_models.REFERENCE_MODELS.items():
        out[f"ref_{name}"] = (f"reference ({cls.__name__})",
                              lambda n=name: demo_models.build(n), inputs, outputs,
                              lambda folder, n=name: reference_models.hand_over(n, folder))
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
    parser.add_argument("--family", default="torch_nn,transformers,transformers_media,torchvision",
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
        catalog_child(json.loads(args.catalog_child))
        return
    if args.catalog:
        if args.summary:
            print(catalog_summary(read_rows(args.out)))
        else:
            run_catalog(args)
        return
    rows = []
    for name, (category, build, inputs, outputs, source) in _models().items():
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            try:
                config = ImporterConfig.of_source(source(tmp), inputs, outputs)
                result = convert.import_model(config, os.path.join(tmp, "model"))
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


if __name__ == "__main__":
    main()
