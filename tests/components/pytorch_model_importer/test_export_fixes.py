"""torch symbolics replaced for every hand-over form (export_fixes.py): index_add with
repeated indices, adaptive average pools to sizes that do not divide the input."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer import export_fixes  # noqa: E402


def _export(model, args, path, names, dynamic=None):
    axes = dynamic or {n: {0: "batch"} for n in names}
    axes["out0"] = {0: "batch"}
    with export_fixes.onnx_symbolics(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), input_names=names, output_names=["out0"],
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    exported = onnx.load(str(path))
    onnx.checker.check_model(exported)
    return exported


def _compare(model, path, make_args, names):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 7):
        args = make_args(batch)
        with torch.no_grad():
            want = model(*args)
        got = session.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})[0]
        assert got.shape == tuple(want.shape)
        np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=1e-5)


class _IndexAdd(torch.nn.Module):
    """index_add with a repeated index: rows 0 and 2 both add into group 0."""

    def __init__(self):
        super().__init__()
        self.register_buffer("groups", torch.tensor([0, 1, 0, 2]))

    def forward(self, x):
        out = torch.zeros(x.shape[0], 3, dtype=x.dtype)
        return out.index_add(1, self.groups, x, alpha=2.0)


def test_export_index_add_with_repeated_indices_sums_like_torch(tmp_path):
    from tfx_bridge.components.pytorch_model_importer import export, signature

    path = str(tmp_path / "m.onnx")
    specs = signature.parse_input_specs(["x:float32:-1,4"])
    rewrites = export.export_onnx(_IndexAdd().eval(), specs, ["y"], path)
    assert [r.kind for r in rewrites] == [export_fixes.INDEX_ADD_SCATTER_ADD]
    for batch in (1, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0]
        with torch.no_grad():
            np.testing.assert_allclose(got, _IndexAdd()(torch.from_numpy(x)).numpy(),
                                       atol=1e-6)


class _Adaptive(nn.Module):
    """Adaptive average pools to sizes that do not divide the input (torch's own
    symbolic refuses them), on 1-D, 2-D and 3-D inputs."""

    def __init__(self, dims: int, out):
        super().__init__()
        self.pool = {1: nn.AdaptiveAvgPool1d, 2: nn.AdaptiveAvgPool2d,
                     3: nn.AdaptiveAvgPool3d}[dims](out)

    def forward(self, x):
        return self.pool(x) * 2.0


@pytest.mark.parametrize("dims,shape,out", [
    (1, (3, 8), 5), (2, (3, 4, 4), (6, 6)), (2, (2, 7, 5), (3, 2)), (2, (2, 6, 6), (3, 2)),
    (3, (2, 5, 7, 6), (2, 3, 4)), (2, (2, 5, 5), (1, 1))])
def test_adaptive_avg_pool_any_output_size_exported_exact(tmp_path, dims, shape, out):
    model = _Adaptive(dims, out).eval()
    args = (torch.randn(2, *shape),)
    path = tmp_path / "pool.onnx"
    exported = _export(model, args, path, ["x"])
    _compare(model, path, lambda b: (torch.randn(b, *shape),), ["x"])
    divides = all(s % o == 0 for s, o in zip(shape[1:], np.broadcast_to(out, (dims,)),
                                             strict=True))
    kinds = {n.op_type for n in exported.graph.node}
    assert ("MatMul" in kinds) == (not divides)  # torch's own form where it has one
    assert [r.kind for r in export_fixes.applied()] == (
        [] if divides else [export_fixes.ADAPTIVE_POOL_MATMUL])


def test_adaptive_avg_pool_dynamic_spatial_size_refused_naming_fix(tmp_path):
    model = _Adaptive(2, (3, 3)).eval()
    with pytest.raises(torch.onnx.errors.SymbolicValueError, match="fixed input size"):
        _export(model, (torch.randn(2, 3, 7, 7),), tmp_path / "p.onnx", ["x"],
                dynamic={"x": {0: "batch", 2: "h", 3: "w"}})
