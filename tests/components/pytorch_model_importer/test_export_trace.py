"""Python branches on tensor values during torch.onnx.export: a MoE layer that skips
experts no token chose exports every expert; a branch frozen for the sample is named."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
ort = pytest.importorskip("onnxruntime")

from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import export, report, signature  # noqa: E402


class SkippingMoE(nn.Module):
    """Top-2 routing of [batch, seq, dim] tokens over 8 experts, written as
    transformers writes MoE blocks: an expert no token chose is skipped with a
    Python branch, so a trace whose sample leaves an expert idle drops it."""

    def __init__(self, dim: int = 4, experts: int = 8):
        super().__init__()
        torch.manual_seed(0)
        self.router = nn.Linear(dim, experts)
        self.experts = nn.ModuleList([nn.Linear(dim, dim) for _ in range(experts)])

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        weights, chosen = torch.topk(self.router(tokens).softmax(-1), 2, dim=-1)
        out = torch.zeros_like(tokens)
        for i, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == i)
            if rows.shape[0] == 0:
                continue
            out = out.index_add(0, rows, expert(tokens[rows]) * weights[rows, slot, None])
        return out.reshape(x.shape)


class FrozenBranch(nn.Module):
    def forward(self, x):
        if x[0, 0] > 0.5:  # the whole batch follows its first value
            return x * 2.0
        return x * 3.0


def _export(module, tmp_path, trace_warnings=None, spec="x:float32:-1,4:-1..1"):
    specs = signature.parse_input_specs([spec])
    path = str(tmp_path / "m.onnx")
    export.export_onnx(module.eval(), specs, ["y"], path, trace_warnings=trace_warnings)
    return path


def test_export_moe_skipping_empty_experts_keeps_every_expert(tmp_path):
    module = SkippingMoE()
    path = _export(module, tmp_path, spec="x:float32:-1,-1,4:-1..1")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 7, 32):
        x = np.random.default_rng(batch).uniform(-1, 1, (batch, 5, 4)).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(session.run(None, {"x": x})[0], want, atol=1e-5)


def test_export_branch_on_tensor_value_named_with_file_line_and_fix(tmp_path):
    caught = []
    _export(FrozenBranch(), tmp_path, caught)
    assert caught and caught[0].startswith(f"{__file__}:")
    assert "TracerWarning" not in caught[0]  # the place and torch's words, once
    cause = report.likely_cause({"blessed": False, "trace_warnings": caught})
    assert cause.startswith("torch traced Python control flow on tensor values")
    assert __file__ in cause and "without Python branches on tensor values" in cause
    assert report.likely_cause({"blessed": True, "trace_warnings": caught}) is None
    assert report.likely_cause({"blessed": False, "trace_warnings": None}) is None


class IgnoresMask(nn.Module):
    """Declares an attention mask it never reads, as some text models do."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)

    def forward(self, ids, mask):
        return self.embed(ids).sum(1)


def test_import_input_model_never_reads_taken_and_ignored(tmp_path):
    """torch leaves an unread input out of the graph; the signatures still take it."""
    import tensorflow as tf

    from tfx_bridge.components.pytorch_model_importer import convert

    torch.save(IgnoresMask().state_dict(), str(tmp_path / "m.pt"))
    source = convert.ModelSource("state_dict", str(tmp_path / "m.pt"),
                                 f"{__name__}:IgnoresMask")
    specs = signature.parse_input_specs(["ids:int64:-1,3:0..9", "mask:int64:-1,3:0..1"])
    result = convert.import_model(source, specs, ["y"], str(tmp_path / "out"))
    assert result.blessed
    applied = {r["kind"]: r["nodes"] for r in result.report["rewrites"]}
    assert applied[export.UNUSED_INPUT] == ["mask"]
    served = tf.saved_model.load(result.serving_dir).signatures["serving_default"]
    assert sorted(served.structured_input_signature[1]) == ["ids", "mask"]
