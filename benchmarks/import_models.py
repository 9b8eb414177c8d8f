"""Conversion benchmark: every reference model through PyTorchModelImporter.

For each model in tfx_bridge.pipelines.demo_models.REFERENCE_MODELS (and the
demo CtrMoE): export + onnx2tf + wrap + verify time, and the largest float
error against torch and onnxruntime at batch sizes 1, 7 and 32 (integer
outputs must match exactly). Figures go into docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/import_models.py
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import torch  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import convert, signature  # noqa: E402
from tfx_bridge.pipelines import demo_models  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    models = dict(demo_models.REFERENCE_MODELS)
    models["ctr_moe"] = (demo_models.CtrMoE, {}, demo_models.CTR_INPUTS,
                         demo_models.CTR_OUTPUTS)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (cls, kwargs, inputs, outputs) in models.items():
            torch.manual_seed(0)
            path = os.path.join(tmp, f"{name}.pt")
            torch.save(cls(**kwargs).eval().state_dict(), path)
            source = convert.ModelSource("state_dict", path,
                                         f"tfx_bridge.pipelines.demo_models:{cls.__name__}",
                                         kwargs)
            result = convert.import_model(source, signature.parse_input_specs(inputs), outputs,
                                          os.path.join(tmp, name))
            checks = result.report["checks"]
            ints = [c for c in checks if c["dtype"].startswith("int")]
            rows.append({
                "model": name, "blessed": result.blessed, "seconds": result.report["seconds"],
                "max_abs_vs_torch": max(c["max_abs"] for c in checks
                                        if c["reference"] == "torch"
                                        and not c["dtype"].startswith("int")),
                "max_abs_vs_onnxruntime": max(c["max_abs"] for c in checks
                                              if c["reference"] == "onnxruntime"
                                              and not c["dtype"].startswith("int")),
                "integer_outputs": ("exact" if ints and all(c["mismatches"] == 0 for c in ints)
                                    else "mismatch" if ints else "none")})
    print("| model | export s | convert s | verify s | max abs vs torch | max abs vs ORT "
          "| integer outputs | blessed |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["seconds"]
        print(f"| {r['model']} | {s['export']} | {s['convert']} | {s['verify']} | "
              f"{r['max_abs_vs_torch']:.2g} | {r['max_abs_vs_onnxruntime']:.2g} | "
              f"{r['integer_outputs']} | {'yes' if r['blessed'] else 'NO'} |")
    if args.json:
        print(json.dumps(rows, sort_keys=True))


if __name__ == "__main__":
    main()
