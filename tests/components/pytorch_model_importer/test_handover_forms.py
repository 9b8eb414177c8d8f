"""One model per family and hand-over form, through the importer's own converter.

Families: torchvision (classification, video), HF transformers (text, vision, audio),
models built from torch.nn; forms: state_dict +
class, TorchScript traced in eval + no_grad, ONNX. The zoo files cover the rest of the
grid (resnet as TorchScript, bert and dlrm as state_dict, text_cnn as TorchScript);
benchmarks/import_models.py --catalog runs whole catalogs in every form.
"""
from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
pytest.importorskip("torchvision", reason="needs the [zoo] extra (torchvision)")
pytest.importorskip("transformers", reason="needs the [zoo] extra (transformers)")

from tfx_bridge.components.pytorch_model_importer import convert  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.report import check_table  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402

GRID = [("mobilenet_v3", "state_dict"), ("resnet", "onnx"), ("bert", "torchscript"),
        ("bert", "onnx"), ("dlrm", "onnx"),
        # transformers' vision and audio models, torchvision's video builders' blocks
        ("vit", "torchscript"), ("vit", "onnx"), ("wav2vec2", "onnx"),
        ("wav2vec2", "torchscript"), ("video_r2plus1d", "torchscript"),
        ("video_r2plus1d", "state_dict")]


@pytest.mark.slow
@pytest.mark.parametrize("name,form", GRID)
def test_handover_form_converted_by_own_converter_and_blessed(tmp_path, name, form):
    entry = zoo.ZOO[name]
    source = zoo.hand_over(name, str(tmp_path), form)
    assert source.kind == form
    result = convert.import_model(
        ImporterConfig.of_source(source, entry.inputs, entry.outputs), str(tmp_path / "model"))
    assert result.blessed, check_table(result.report["checks"])
    assert result.report["converter"] == "tfx-bridge"
    refs = {c["reference"] for c in result.report["checks"]}
    assert "onnxruntime" in refs and ("torch" in refs) == (form != "onnx")
