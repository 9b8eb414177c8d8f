"""The importer, then the optimizer, with source and outputs on s3:// (S3-compatible
server on 127.0.0.1): torch, onnx and TF-TRT see local copies, the artifacts land on s3."""
from __future__ import annotations

import json

import pytest

from tfx_bridge.storage import fs

pytestmark = pytest.mark.s3


def test_import_then_optimize_s3_source_and_outputs(tmp_path, s3_bucket):
    torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.trt_optimizer import detect, optimize
    from tfx_bridge.pipelines import demo_models

    local = str(tmp_path / "mlp.pt")
    torch.save(demo_models.build("mlp").state_dict(), local)
    weights = fs.join(s3_bucket, "research", "mlp.pt")
    fs.copy(local, weights)
    imported = fs.join(s3_bucket, "imported")
    config = ImporterConfig(source_kind="state_dict", source_path=weights,
                            module_class="tfx_bridge.pipelines.demo_models:MLP",
                            inputs=["x:float32:-1,8"], output_names=["logits"])
    result = convert.import_model(config, imported)
    assert result.blessed and result.serving_dir == fs.join(imported, "Format-Serving")
    report = json.loads(fs.read_text(fs.join(imported, "report.json")))
    assert report["blessed"] is True and report["source"]["path"] == weights
    assert fs.isfile(fs.join(imported, "Format-Serving", "saved_model.pb"))

    optimized = fs.join(s3_bucket, "optimized")
    probe = detect.Probe(False, 0, None, None, "not probed in this test (CPU path)")
    out = optimize.optimize(imported, optimized, optimize.OptimizerConfig(iterations=10),
                            probe=probe)
    assert out.blessed
    saved = json.loads(fs.read_text(fs.join(optimized, "report.json")))
    assert saved["candidate"] == out.report["candidate"]
    assert fs.isfile(fs.join(optimized, "Format-Serving", "saved_model.pb"))
