"""F.affine_grid exported below opset 20 as a base grid times theta (export/grids.py):
checked against torch through onnxruntime at odd sizes, both align_corners, 2-D
and 3-D, constant and dynamic sizes; a spatial transformer through the whole
importer as TorchScript."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer.export import (  # noqa: E402
    grids,
    symbolic_rewrites,
)


class _Transformer(nn.Module):
    """A spatial transformer: theta from a small localisation head, then the grid
    (and, in 2-D, the resampled input)."""

    def __init__(self, spatial, align: bool, size_from_input: bool):
        super().__init__()
        self.spatial, self.align, self.size_from_input = spatial, align, size_from_input
        k = len(spatial)
        self.k = k
        self.head = nn.Linear(5, k * (k + 1))

    def forward(self, x, z):
        theta = self.head(z).view(z.shape[0], self.k, self.k + 1)
        size = ([x.shape[0], x.shape[1], *x.shape[2:]] if self.size_from_input
                else [x.shape[0], x.shape[1], *self.spatial])
        grid = F.affine_grid(theta, size, align_corners=self.align)
        if self.k == 2:
            return grid, F.grid_sample(x, grid, align_corners=self.align)
        return grid, grid.sum(dim=-1)


def _export(model, x, z, path):
    axes = {"x": {0: "batch"}, "z": {0: "batch"}}
    with symbolic_rewrites.onnx_symbolics(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x, z), str(path), input_names=["x", "z"],
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    onnx.checker.check_model(onnx.load(str(path)))
    return symbolic_rewrites.rewrites()


@pytest.mark.parametrize("spatial", [(5, 7), (1, 3), (3, 4, 6)],
                         ids=["2d-odd", "2d-one-row", "3d"])
@pytest.mark.parametrize("align", [False, True], ids=["centers", "corners"])
@pytest.mark.parametrize("size_from_input", [False, True], ids=["constant", "traced"])
def test_export_affine_grid_opset_17_matches_torch(tmp_path, spatial, align,
                                                   size_from_input):
    torch.manual_seed(0)
    model = _Transformer(spatial, align, size_from_input).eval()
    found = _export(model, torch.randn(3, 2, *spatial), torch.randn(3, 5),
                    tmp_path / "m.onnx")
    assert [r.kind for r in found] == [grids.AFFINE_GRID_MATMUL]
    assert found[0].nodes == [f"1 affine_grid call(s), {len(spatial)}-D"]
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    for batch in (1, 4):  # another batch than the traced one
        x, z = torch.randn(batch, 2, *spatial), torch.randn(batch, 5)
        got = session.run(None, {"x": x.numpy(), "z": z.numpy()})
        with torch.no_grad():
            want = model(x, z)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


def test_export_affine_grid_opset_20_keeps_torchs_affine_grid(tmp_path):
    model = _Transformer((4, 5), False, False).eval()
    with symbolic_rewrites.onnx_symbolics(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 2, 4, 5), torch.randn(2, 5)),
                          str(tmp_path / "m.onnx"), opset_version=20, dynamo=False)
    ops = {n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node}
    assert "AffineGrid" in ops and grids.used() == []


def test_import_spatial_transformer_torchscript_converted_and_verified_onednn_off(tmp_path):
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.pytorch_model_importer.source import ModelSource

    class Stn(nn.Module):
        def __init__(self):
            super().__init__()
            self.loc = nn.Sequential(nn.Flatten(), nn.Linear(3 * 9 * 11, 6))
            self.register_buffer("identity", torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))

        def forward(self, x):
            theta = self.loc(x).view(-1, 2, 3) * 0.1 + self.identity
            grid = F.affine_grid(theta, list(x.shape), align_corners=False)
            return F.grid_sample(x, grid, align_corners=False)

    torch.manual_seed(0)
    path = str(tmp_path / "stn.pt")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # affine_grid's own size checks, read as constants
        torch.jit.trace(Stn().eval(), (torch.randn(2, 3, 9, 11),)).save(path)
    config = ImporterConfig.of_source(ModelSource("torchscript", path),
                                      ["x:float32:-1,3,9,11"], ["y"])
    # verify() runs the SavedModel in a fresh process with TF_ENABLE_ONEDNN_OPTS=0.
    result = convert.import_model(config, str(tmp_path / "out"))
    assert result.blessed, result.report["checks"]
    assert grids.AFFINE_GRID_MATMUL in [r["kind"] for r in result.report["rewrites"]]
    assert result.report["converter"] == "tfx-bridge"
