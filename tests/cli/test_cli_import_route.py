"""``tfx-bridge import-model`` writes the component's artifact: Format-PyTorch/, the
source digest and the converter, and takes a trainer's Model folder as its source."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge import cli  # noqa: E402
from tfx_bridge.pipelines import demo_models  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402


def _main(capfd, *args):
    code = cli.main(list(args))
    out, err = capfd.readouterr()
    return code, out, err


@pytest.mark.slow
def test_cli_import_model_state_dict_then_source_model_same_artifact(tmp_path, capfd):
    weights = str(tmp_path / "mlp.pt")
    torch.save(demo_models.build("mlp").state_dict(), weights)
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    code, out, err = _main(capfd, "import-model", "--state-dict", weights, "--module-class",
                           "tfx_bridge.pipelines.demo_models:MLP", "--input", "x:float32:-1,8",
                           "--output-name", "logits", "--output", first, "--json", "--quiet")
    assert code == cli.EXIT_OK, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["converter"] == "tfx-bridge"
    report = json.load(open(os.path.join(first, "report.json")))
    spec = torch_model.read_spec(torch_model.folder_of(first))
    assert (spec.module_class, spec.inputs, spec.outputs) == (
        "tfx_bridge.pipelines.demo_models:MLP", ["x:float32:-1,8"], ["logits"])
    # The trainer's route: everything comes from the spec inside the folder.
    code, out, err = _main(capfd, "import-model", "--source-model", first, "--output", second,
                           "--json", "--quiet")
    assert code == cli.EXIT_OK, err
    again = json.load(open(os.path.join(second, "report.json")))
    assert again["source_digest"] == report["source_digest"] and len(report["source_digest"]) == 64
    assert torch_model.has_model(torch_model.folder_of(second))


def test_cli_import_model_source_model_without_spec_exit_2(tmp_path, capfd):
    code, _, err = _main(capfd, "import-model", "--source-model", str(tmp_path), "--output",
                         str(tmp_path / "out"))
    assert code == cli.EXIT_BAD_INPUT
    assert "holds no Format-PyTorch/model_spec.json" in err and "Traceback" not in err


# What may differ between two imports of one model: wall-clock figures, and where
# the source and output were (the CLI's temp staging folder, the pipeline root).
_RUN_FIELDS = ("seconds", "source", "serving_dir", "output_dir", "onnx_path")


def _facts(value):
    """The report without run-dependent fields, at any depth."""
    if isinstance(value, dict):
        return {k: _facts(v) for k, v in value.items() if k not in _RUN_FIELDS}
    if isinstance(value, list):
        return [_facts(v) for v in value]
    return value


@pytest.mark.slow
def test_cli_import_model_and_component_write_the_same_folder(tmp_path, capfd, component_model,
                                                              file_tree):
    from tfx import v1 as tfx

    from tfx_bridge.artifacts import savedmodel
    from tfx_bridge.components import PyTorchModelImporter

    research = tmp_path / "research"
    research.mkdir()
    torch.manual_seed(0)
    torch.save(demo_models.build("mlp").state_dict(), str(research / "weights.pt"))
    args = {"module_class": "tfx_bridge.pipelines.demo_models:MLP",
            "inputs": ["x:float32:-1,8"], "output_names": ["logits"]}
    # Settings other than the defaults: one the CLI dropped would change the digest.
    settings = {"opset": 18, "atol": 2e-4, "graph_rewrites": False}
    source = tfx.dsl.Importer(source_uri=str(research),
                              artifact_type=tfx.types.standard_artifacts.Model
                              ).with_id("research_output")
    importer = PyTorchModelImporter(source_kind="state_dict", source_path="weights.pt",
                                    source_model=source.outputs["result"], **args,
                                    **settings)
    component_dir = component_model(source, importer).uri
    cli_dir = str(tmp_path / "cli")
    code, _, err = _main(capfd, "import-model", "--state-dict", str(research / "weights.pt"),
                         "--module-class", args["module_class"], "--input", args["inputs"][0],
                         "--output-name", "logits", "--opset", "18", "--atol", "2e-4",
                         "--no-graph-rewrites", "--output", cli_dir, "--quiet")
    assert code == cli.EXIT_OK, err

    by_component, by_cli = file_tree(component_dir), file_tree(cli_dir)
    assert sorted(by_component) == sorted(by_cli)
    assert any(p.startswith("Format-PyTorch") for p in by_cli)
    report_a, report_b = (json.loads(t["report.json"]) for t in (by_component, by_cli))
    assert _facts(report_a) == _facts(report_b)
    assert report_b["opset"] == 18 and report_b["tolerance"]["atol"] == 2e-4
    for path in sorted(by_cli):
        if path in ("report.json", "report.md"):
            continue
        if path.startswith("Format-PyTorch") or path.endswith(".json"):
            assert by_component[path] == by_cli[path], path  # the same bytes
    for name in (savedmodel.SERVING_SIGNATURE, savedmodel.EXAMPLE_SIGNATURE):
        specs = [savedmodel.signature_specs(os.path.join(d, savedmodel.SERVING_DIR), name)
                 for d in (component_dir, cli_dir)]
        assert specs[0] == specs[1], name
