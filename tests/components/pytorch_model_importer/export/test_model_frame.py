"""An export that fails in the model's own forward names the line and module, and
tells a model that rejects the sample from a line that fails only under tracing."""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import signature  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.errors import ModelSourceError  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.export import stage  # noqa: E402


class FramesBlock(nn.Module):
    """Groups rows into clips of ``frames``, as video towers do: batch // frames clips."""

    def __init__(self, frames: int, traced_differently: bool = False):
        super().__init__()
        self.frames, self.traced_differently = frames, traced_differently
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        frames = self.frames
        if self.traced_differently and torch.jit.is_tracing():
            frames = 5  # a size the traced path computes otherwise
        clips = x.shape[0] // frames
        return self.proj(x).view(clips, frames, 6).mean(1)


class Tower(nn.Module):
    def __init__(self, frames: int, traced_differently: bool = False):
        super().__init__()
        self.block = FramesBlock(frames, traced_differently)

    def forward(self, x):
        return self.block(x)


def _refusal(module, tmp_path) -> str:
    specs = signature.parse_input_specs(["x:float32:-1,6"])
    with pytest.raises(ModelSourceError) as raised:
        stage.export_onnx(module.eval(), specs, ["y"], str(tmp_path / "m.onnx"), batch=32)
    return str(raised.value)


def test_export_failure_model_rejects_sample_names_line_module_and_eager_error(tmp_path):
    message = _refusal(Tower(frames=5), tmp_path)
    assert message.startswith("torch.onnx.export failed in the model's forward: RuntimeError")
    assert re.search(r"\(at test_model_frame\.py:\d+ in forward\(\), PyTorch module 'block' "
                     r"\(FramesBlock\)\)", message)
    assert "the model's own code rejects the export's sample input (x:float32:-1,6 at " \
           "batch 32): torch raises RuntimeError" in message
    assert "densely" not in message


def test_export_failure_only_under_tracing_names_line_and_tracing_cause(tmp_path):
    message = _refusal(Tower(frames=4, traced_differently=True), tmp_path)
    assert "PyTorch module 'block' (FramesBlock)" in message
    assert "that line runs eagerly on the same sample but fails under tracing" in message
