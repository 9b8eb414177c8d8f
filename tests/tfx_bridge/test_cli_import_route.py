"""``tfx-bridge import-model`` writes the component's artifact: Format-PyTorch/, the
source digest and the converter, and takes a trainer's Model folder as its source."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge import cli, torch_model  # noqa: E402
from tfx_bridge.pipelines import demo_models  # noqa: E402


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
