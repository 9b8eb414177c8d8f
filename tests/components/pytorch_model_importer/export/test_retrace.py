"""A loaded TorchScript module whose saved graph lacks the shapes the exporter needs
(cross-attention of nn.MultiheadAttention, nn.TransformerDecoder) is run op by op
and traced again (export/retrace.py): the same numbers, sizes still dynamic, and it
converts as the eager module does; a scripted graph with control flow is left as is."""
from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
ort = pytest.importorskip("onnxruntime")

from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import signature  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.export import retrace, stage  # noqa: E402

SPECS = ["x:float32:-1,5,16", "memory:float32:-1,7,16"]


class _CrossAttention(nn.Module):
    """MultiheadAttention over another sequence (the slow path), weights returned."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x, memory):
        out, weights = self.attn(x, memory, memory)
        return out + weights.sum(-1, keepdim=True)


class _Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 4, 32, batch_first=True),
                                         2)

    def forward(self, x, memory):
        return self.dec(x, memory)


def _loaded(module, batch: int = 2):
    torch.manual_seed(0)
    module = module.eval()
    with torch.no_grad():
        traced = torch.jit.trace(module, (torch.randn(batch, 5, 16), torch.randn(batch, 7, 16)))
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer)
    buffer.seek(0)
    return module, torch.jit.load(buffer).eval()


@pytest.mark.parametrize("build", [_CrossAttention, _Decoder], ids=["cross_attention", "decoder"])
def test_retraced_loaded_trace_runs_the_same_ops_at_another_batch(build):
    eager, loaded = _loaded(build())
    again = retrace.retraced(loaded, (torch.randn(2, 5, 16), torch.randn(2, 7, 16)))
    assert again is not None
    x, memory = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    with torch.no_grad():
        np.testing.assert_allclose(again(x, memory).numpy(), eager(x, memory).numpy(),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("build", [_CrossAttention, _Decoder], ids=["cross_attention", "decoder"])
def test_export_torchscript_without_shapes_retraced_and_matches_torch(tmp_path, build):
    eager, loaded = _loaded(build())
    path = str(tmp_path / "m.onnx")
    applied = stage.export_onnx(loaded, signature.parse_input_specs(SPECS), ["y"], path)
    kinds = [r.kind for r in applied]
    assert kinds[0] == retrace.RETRACED, kinds
    assert "unknown rank" in applied[0].nodes[0]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 4):
        x, memory = torch.randn(batch, 5, 16), torch.randn(batch, 7, 16)
        got = session.run(None, {"x": x.numpy(), "memory": memory.numpy()})[0]
        with torch.no_grad():
            np.testing.assert_allclose(got, eager(x, memory).numpy(), rtol=1e-4, atol=1e-5)


def test_retraced_scripted_graph_with_control_flow_left_as_is():
    class Branchy(nn.Module):
        def forward(self, x, memory):
            if x.size(1) > 1:
                return x * 2
            return memory

    scripted = torch.jit.script(Branchy())
    assert retrace.retraced(scripted, (torch.randn(2, 5, 16), torch.randn(2, 7, 16))) is None


def test_import_torchscript_decoder_converted_and_verified_onednn_off(tmp_path):
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.pytorch_model_importer.source import ModelSource

    _, loaded = _loaded(_Decoder())
    path = str(tmp_path / "decoder.pt")
    torch.jit.save(loaded, path)
    config = ImporterConfig.of_source(ModelSource("torchscript", path), SPECS, ["y"])
    # verify() runs the SavedModel in a fresh process with TF_ENABLE_ONEDNN_OPTS=0.
    result = convert.import_model(config, str(tmp_path / "out"))
    assert result.blessed, result.report["checks"]
    assert retrace.RETRACED in [r["kind"] for r in result.report["rewrites"]]
    assert result.report["converter"] == "tfx-bridge"
