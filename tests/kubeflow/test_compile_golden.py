"""The compiled Kubeflow Pipelines V2 spec is the one checked in: a change to the
pipeline's components, parameters, images or entrypoints shows up here as a diff.

After a deliberate change: TFX_BRIDGE_UPDATE_GOLDEN=1 pytest tests/kubeflow/ -k golden,
then review and commit tests/kubeflow/golden/.
"""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("kfp", reason="needs the [kfp] extra")

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
IMAGE_SCHEMAS = "/tfx-bridge/schemas/"
# Versions of the tools that compiled it: not part of what the pipeline does.
_VOLATILE = ("sdkVersion", "tfx_version", "tfx_py_version")


def _stable(value):
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hand_over", "train"])
def test_compiled_kubeflow_spec_matches_golden(tmp_path, mode):
    from tfx_bridge.kubeflow import compile as kfp_compile

    out = kfp_compile.compile_pipeline(
        str(tmp_path / "pipeline.json"), "gs://bucket/tfx-bridge/root",
        "gs://bucket/tfx-bridge/data",
        "gs://bucket/research" if mode == "hand_over" else None, "/models",
        schema_path=IMAGE_SCHEMAS + "demo.schema.pbtxt",
        contract_path=IMAGE_SCHEMAS + "demo.contract.yaml")
    with open(out, encoding="utf-8") as f:
        got = _stable(json.load(f))
    path = os.path.join(GOLDEN, f"pipeline_{mode}.json")
    if os.environ.get("TFX_BRIDGE_UPDATE_GOLDEN"):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(got, f, indent=1, sort_keys=True)
            f.write("\n")
    with open(path, encoding="utf-8") as f:
        want = json.load(f)
    assert got == want, (f"the compiled spec differs from {path}: if the change is meant, "
                         "regenerate it (TFX_BRIDGE_UPDATE_GOLDEN=1) and review the diff")
