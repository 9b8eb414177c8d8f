"""``tfx-bridge optimize`` writes the component's artifact: the same files, the
input's Format-PyTorch/ carried, the same settings in the report, and a summary
that says what the component records as properties."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge import cli  # noqa: E402
from tfx_bridge.cli.common import LIBRARY_LOG  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402


def _tried(report: dict) -> list:
    """The candidates each route tried and whether each passed the drift gate: timings
    and measured differences are left out (they vary from run to run)."""
    return [(c["name"], c["backend"], c["error"] is None, c["passed"])
            for c in report["candidates"]]


def _run_component(component_model, model_dir: str, settings: dict):
    """TrtOptimizer in a local pipeline over ``model_dir`` as an imported Model."""
    from tfx import v1 as tfx
    from tfx import version as tfx_version

    from tfx_bridge.components import TrtOptimizer

    source = tfx.dsl.Importer(
        source_uri=model_dir, artifact_type=tfx.types.standard_artifacts.Model,
        # What the importer's output carries: read as a current Model (Format-Serving/).
        custom_properties={"tfx_version": tfx_version.__version__}).with_id("imported")
    return component_model(source, TrtOptimizer(model=source.outputs["result"], **settings))


@pytest.mark.slow
def test_cli_optimize_and_component_write_the_same_folder(tmp_path, capfd, reference_imports,
                                                          component_model, file_tree):
    from tfx_bridge.artifacts import properties, savedmodel

    model_dir = os.path.dirname(reference_imports["mlp"].serving_dir)
    assert torch_model.has_model(torch_model.folder_of(model_dir))  # the input carries one
    # Settings other than the defaults: one a route dropped would show in the report.
    settings = {"iterations": 12, "atol": 5e-4, "topk_threshold": 0.9}
    model = _run_component(component_model, model_dir, settings)
    cli_dir = str(tmp_path / "cli")
    code = cli.main(["optimize", "--model", model_dir, "--output", cli_dir, "--iterations", "12",
                     "--atol", "5e-4", "--topk-threshold", "0.9", "--json", "--quiet"])
    out, err = capfd.readouterr()
    assert code == cli.EXIT_OK, err
    summary = json.loads(out.strip().splitlines()[-1])

    by_component = file_tree(model.uri)
    by_cli = {p: b for p, b in file_tree(cli_dir).items() if p != LIBRARY_LOG}  # the CLI's own log
    report_a, report_b = (json.loads(t["report.json"]) for t in (by_component, by_cli))
    top = sorted({p.split("/")[0] for p in by_component})
    assert top == sorted({p.split("/")[0] for p in by_cli})
    assert "Format-PyTorch" in top
    for path in file_tree(torch_model.folder_of(model_dir)):
        path = f"{torch_model.PYTORCH_DIR}/{path}"
        assert by_component[path] == by_cli[path], path  # the input's bytes, by both routes
    for key in ("tolerance", "batches", "precision", "requires_gpu", "tensorrt"):
        assert report_a[key] == report_b[key], key
    assert report_b["tolerance"]["atol"] == 5e-4 and report_b["tolerance"]["topk_agreement"] == 0.9
    assert _tried(report_a) == _tried(report_b)
    if report_a["candidate"] == report_b["candidate"]:  # which one is fastest may differ
        assert sorted(by_component) == sorted(by_cli)
    for name in (savedmodel.SERVING_SIGNATURE, savedmodel.EXAMPLE_SIGNATURE):
        specs = [savedmodel.signature_specs(os.path.join(d, savedmodel.SERVING_DIR), name)
                 for d in (model.uri, cli_dir)]
        assert specs[0] == specs[1], name

    # The component's properties and the CLI's summary: both say what their report says.
    props = model.custom_properties
    assert props["blessed"].int_value == int(report_a["blessed"])
    assert summary["blessed"] == report_b["blessed"] and report_a["blessed"] == report_b["blessed"]
    assert props["backend"].string_value == report_a["backend"]
    assert summary["backend"] == report_b["backend"]
    assert props["precision"].string_value == summary["precision"] == "fp32"
    assert props["requires_gpu"].int_value == int(summary["requires_gpu"]) == 0
    assert props["serving_flags"].string_value == " ".join(report_a["serving_flags"])
    assert summary["serving_flags"] == report_b["serving_flags"]
    largest = f"p50_ms_batch_{max(report_a['batches'])}"
    assert properties.get_float(model, "latency_p50_ms_after") == \
        report_a["latency_after_ms"][largest]
    assert summary["latency_after_ms"] == report_b["latency_after_ms"]
    assert props["decision"].string_value == report_a["decision"]["reason"]
    assert summary["decision"] == report_b["decision"]["reason"]
