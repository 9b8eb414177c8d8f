"""Python branches on tensor values during torch.onnx.export: a MoE layer that skips
experts no token chose exports every expert; a branch frozen for the sample is named."""
from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
ort = pytest.importorskip("onnxruntime")

from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import report, signature  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.export import (  # noqa: E402
    module_rewrites,
    stage,
)


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
    stage.export_onnx(module.eval(), specs, ["y"], path, trace_warnings=trace_warnings)
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
    assert __file__ in cause and "instead of Python branches" in cause
    assert report.likely_cause({"blessed": True, "trace_warnings": caught}) is None
    assert report.likely_cause({"blessed": False, "trace_warnings": None}) is None


class FrozenBatch(nn.Module):
    """Takes the batch as a Python int, as some attention code sizes its chunks: the
    trace keeps the export sample's batch as a constant."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        n = int(x.shape[0])
        return self.proj(x).reshape(n, 2, 2).sum(-1)


class FrozenBatchMixingRows(FrozenBatch):
    """As FrozenBatch, but the frozen reshape also moves values between rows, so the
    graph exported for one row is not the model either."""

    def forward(self, x):
        n = int(x.shape[0])
        return self.proj(x).reshape(2, n, 2).transpose(0, 1).reshape(n, 4).sum(-1)


def _import(tmp_path, cls, specs):
    """The importer on a state_dict of ``cls`` (a class of this module)."""
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig

    torch.save(cls().state_dict(), str(tmp_path / "m.pt"))
    config = ImporterConfig(source_kind="state_dict", source_path=str(tmp_path / "m.pt"),
                            module_class=f"{__name__}:{cls.__name__}", inputs=specs,
                            output_names=["y"])
    return convert.import_model(config, str(tmp_path / "out"))


def test_import_export_froze_the_batch_names_onnxruntime_node_and_module(tmp_path):
    """The SavedModel follows the exported ONNX, which is only right at the export's
    batch, and rows mix, so the row-wise retry fails too: not equivalent, and the
    report says the export (node, module) is at fault."""
    result = _import(tmp_path, FrozenBatchMixingRows, ["x:float32:-1,4:-1..1"])
    assert not result.blessed
    assert "row-wise-serving" not in [r["kind"] for r in result.report["rewrites"]]
    found = result.report["export_check"]
    assert {f["batch"] for f in found} == {1, 7}  # right at the export's batch, 32
    assert all(f["op"] == "Reshape" and "from module 'proj'" not in f["where"]
               for f in found)
    cause = report.likely_cause(result.report)
    assert cause.startswith("the exported ONNX graph is not the torch model: at batch 1 "
                            "onnxruntime fails at ONNX op Reshape (node /")
    assert "FrozenBatchMixingRows" in cause and __file__ in cause  # module, traced line


class OwnExportPath(nn.Module):
    """Carries its own code path for ONNX export behind ``config.onnx_export``, as
    transformers' Longformer and LED do; the default path freezes the batch."""

    def __init__(self):
        super().__init__()
        self.config = types.SimpleNamespace()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        if getattr(self.config, "onnx_export", False):
            return self.proj(x).reshape(-1, 2, 2).sum(-1)
        n = int(x.shape[0])
        return self.proj(x).reshape(n, 2, 2).sum(-1)


def test_import_model_with_own_export_path_exported_through_it_and_verified(tmp_path):
    result = _import(tmp_path, OwnExportPath, ["x:float32:-1,4:-1..1"])
    assert result.blessed, result.report["checks"]  # against the default path
    applied = {r["kind"]: r["nodes"] for r in result.report["rewrites"]}
    assert applied[module_rewrites.MODEL_ONNX_EXPORT_PATH] == ["OwnExportPath"]


def test_model_export_paths_restores_config_after_export():
    module = OwnExportPath()
    with module_rewrites.model_export_paths(module) as names:
        assert names == ["OwnExportPath"] and module.config.onnx_export is True
    assert not hasattr(module.config, "onnx_export")
    with module_rewrites.model_export_paths(FrozenBatch()) as names:  # no config to switch
        assert names == []


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

    result = _import(tmp_path, IgnoresMask, ["ids:int64:-1,3:0..9", "mask:int64:-1,3:0..1"])
    assert result.blessed
    # A faithful export: onnxruntime is torch's computation at every batch, no cause named.
    assert result.report["export_check"] == [] and report.likely_cause(result.report) is None
    applied = {r["kind"]: r["nodes"] for r in result.report["rewrites"]}
    assert applied[stage.UNUSED_INPUT] == ["mask"]
    served = tf.saved_model.load(result.serving_dir).signatures["serving_default"]
    assert sorted(served.structured_input_signature[1]) == ["ids", "mask"]


def test_import_onnx_handover_without_unread_input_taken_and_ignored(tmp_path):
    """The user's own ONNX file lacks the unread input, as ours does: the same rewrite,
    the same signature; an input the graph has but nobody declared is still refused."""
    import tensorflow as tf

    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError

    path = str(tmp_path / "m.onnx")
    torch.onnx.export(IgnoresMask().eval(), (torch.zeros(2, 3, dtype=torch.int64),
                                             torch.ones(2, 3, dtype=torch.int64)), path,
                      input_names=["ids", "mask"], output_names=["y"], opset_version=17,
                      dynamo=False, dynamic_axes={"ids": {0: "b"}, "y": {0: "b"}})

    def config(specs):
        return ImporterConfig(source_kind="onnx", source_path=path, inputs=specs,
                              output_names=["y"])

    result = convert.import_model(
        config(["ids:int64:-1,3:0..9", "mask:int64:-1,3:0..1"]), str(tmp_path / "out"))
    assert result.blessed, result.report["checks"]
    applied = {r["kind"]: r["nodes"] for r in result.report["rewrites"]}
    assert applied[stage.UNUSED_INPUT] == ["mask"]
    served = tf.saved_model.load(result.serving_dir).signatures["serving_default"]
    assert sorted(served.structured_input_signature[1]) == ["ids", "mask"]
    with pytest.raises(ImporterConfigError, match=r"graph inputs are \['ids'\]"):
        convert.import_model(config(["tokens:int64:-1,3:0..9"]), str(tmp_path / "out2"))


class ConvsInAPlainList(nn.Module):
    """Keeps its convolutions in a Python list: their parameters are not the module's,
    so the tracer meets them as constants that require grad."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 4, 1)
        self.heads = [nn.Conv2d(4, 2, 1), nn.Conv2d(4, 2, 3, padding=1)]

    def forward(self, x):
        y = self.stem(x)
        return sum(head(y) for head in self.heads)


def test_export_unregistered_parameters_frozen_named_and_equal_to_torch(tmp_path):
    module = ConvsInAPlainList().eval()
    specs = signature.parse_input_specs(["x:float32:-1,3,5,7"])
    path = str(tmp_path / "m.onnx")
    applied = {r.kind: r.nodes for r in stage.export_onnx(module, specs, ["y"], path)}
    assert applied[module_rewrites.UNREGISTERED_PARAMETERS_FROZEN] == [
        "heads[0].weight", "heads[0].bias", "heads[1].weight", "heads[1].bias"]
    assert all(p.requires_grad for head in module.heads for p in head.parameters())
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 7)).astype(np.float32)
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
