"""torch.searchsorted exported as a counted broadcast comparison
(export/searchsorted.py): against torch through onnxruntime, ties on the sorted
entries included, and a quantile-binned feature model through the whole importer."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
ort = pytest.importorskip("onnxruntime")

from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer.export import (  # noqa: E402
    searchsorted,
    symbolic_rewrites,
)

BOUNDS = torch.tensor([-1.0, 0.0, 0.5, 2.0])
SORTED = torch.tensor([[0.0, 1.0, 1.0, 3.0], [-2.0, -1.0, 4.0, 9.0]])

CASES = {
    "searchsorted_1d_left": lambda x: torch.searchsorted(BOUNDS, x),
    "searchsorted_1d_right_int32": lambda x: torch.searchsorted(BOUNDS, x, right=True,
                                                                out_int32=True),
    "searchsorted_int_values": lambda x: torch.searchsorted(BOUNDS, (x * 2).round().long()),
    "searchsorted_1d_side_right": lambda x: torch.searchsorted(BOUNDS, x, side="right"),
    "searchsorted_batched": lambda x: torch.searchsorted(SORTED, x),
    "searchsorted_batched_right": lambda x: torch.searchsorted(SORTED, x, right=True),
}


def _module(fn) -> nn.Module:
    module = nn.Module()
    module.forward = fn
    return module.eval()


def _values(batch: int) -> torch.Tensor:
    """Random values with exact ties on the boundaries and sorted entries."""
    x = torch.randn(batch, 2) * 3
    x[0] = torch.tensor([0.0, 1.0])
    return x


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_searchsorted_matches_torch(tmp_path, name):
    fn = CASES[name]
    path = str(tmp_path / "b.onnx")
    with symbolic_rewrites.onnx_symbolics(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_module(fn), (_values(2),), path, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}} if "batched" not in name else None,
                          opset_version=17, dynamo=False)
    assert searchsorted.used() and searchsorted.COMPARE_COUNT in [
        r.kind for r in symbolic_rewrites.rewrites()]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in ((2,) if "batched" in name else (1, 2, 9)):
        x = _values(batch)
        got, want = session.run(None, {"x": x.numpy()})[0], fn(x).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)  # integer indices: exact


def test_export_searchsorted_without_the_rewrite_torch_refuses():
    with pytest.raises((ValueError, RuntimeError, torch.onnx.errors.OnnxExporterError)), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_module(CASES["searchsorted_1d_left"]), (_values(2),), io.BytesIO(),
                          opset_version=17, dynamo=False)


def test_export_searchsorted_with_sorter_refused_by_name(tmp_path):
    fn = lambda x: torch.searchsorted(BOUNDS, x, sorter=torch.arange(4))  # noqa: E731
    with symbolic_rewrites.onnx_symbolics(), \
            pytest.raises(torch.onnx.errors.SymbolicValueError, match="with a sorter"):
        torch.onnx.export(_module(fn), (_values(2),), str(tmp_path / "s.onnx"),
                          opset_version=17, dynamo=False)


class _QuantileCtr(nn.Module):
    """A tabular model: a price binned at fixed quantiles feeds an embedding."""

    def __init__(self):
        super().__init__()
        self.register_buffer("edges", torch.tensor([1.0, 5.0, 10.0, 50.0, 100.0]))
        self.embed = nn.Embedding(6, 4)
        self.head = nn.Linear(5, 1)

    def forward(self, price):
        bucket = self.embed(torch.searchsorted(self.edges, price, side="right"))
        return torch.sigmoid(self.head(torch.cat([bucket, price.log1p().unsqueeze(1)], 1)))


def test_import_quantile_binned_feature_model_converted_and_verified_onednn_off(tmp_path):
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.pytorch_model_importer.source import ModelSource

    torch.manual_seed(0)
    path = str(tmp_path / "ctr.pt")
    with torch.no_grad():
        torch.jit.trace(_QuantileCtr().eval(), (torch.rand(3) * 120,)).save(path)
    config = ImporterConfig.of_source(ModelSource("torchscript", path),
                                      ["price:float32:-1:0..120"], ["score"])
    result = convert.import_model(config, str(tmp_path / "out"))
    assert result.blessed, result.report["checks"]
    assert searchsorted.COMPARE_COUNT in [r["kind"] for r in result.report["rewrites"]]
    assert result.report["converter"] == "tfx-bridge"
