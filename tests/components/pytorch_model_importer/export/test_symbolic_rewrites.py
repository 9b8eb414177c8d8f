"""torch symbolics replaced for every hand-over form (export/symbolic_rewrites.py): index_add with
repeated indices, adaptive average pools to sizes that do not divide the input."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer.export import symbolic_rewrites  # noqa: E402


def _export(model, args, path, names, dynamic=None):
    axes = dynamic or {n: {0: "batch"} for n in names}
    axes["out0"] = {0: "batch"}
    with symbolic_rewrites.onnx_symbolics(), torch.no_grad(), warnings.catch_warnings():
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
    from tfx_bridge.components.pytorch_model_importer import signature
    from tfx_bridge.components.pytorch_model_importer.export import stage

    path = str(tmp_path / "m.onnx")
    specs = signature.parse_input_specs(["x:float32:-1,4"])
    rewrites = stage.export_onnx(_IndexAdd().eval(), specs, ["y"], path)
    assert [r.kind for r in rewrites] == [symbolic_rewrites.INDEX_ADD_SCATTER_ADD]
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
    assert [r.kind for r in symbolic_rewrites.rewrites()] == (
        [] if divides else [symbolic_rewrites.ADAPTIVE_POOL_MATMUL])


def test_adaptive_avg_pool_dynamic_spatial_size_refused_naming_fix(tmp_path):
    model = _Adaptive(2, (3, 3)).eval()
    with pytest.raises(torch.onnx.errors.SymbolicValueError, match="fixed input size"):
        _export(model, (torch.randn(2, 3, 7, 7),), tmp_path / "p.onnx", ["x"],
                dynamic={"x": {0: "batch", 2: "h", 3: "w"}})


class _Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("fn,applied", [
    # Cohere's rotary embedding: torch's symbolic exports an Expand onnxruntime refuses.
    (lambda x: torch.repeat_interleave(x @ x.transpose(1, 2), 2, dim=-1), True),
    (lambda x: x.repeat_interleave(3, dim=1) * 2.0, True),
    (lambda x: torch.repeat_interleave(x, 2), True),  # no dim: flattened
])
def test_export_repeat_interleave_single_count_matches_torch(tmp_path, fn, applied):
    model = _Lambda(fn).eval()
    path = tmp_path / "r.onnx"
    _export(model, (torch.randn(2, 3, 4),), path, ["x"])
    _compare(model, path, lambda b: (torch.randn(b, 3, 4),), ["x"])
    assert (symbolic_rewrites.REPEAT_INTERLEAVE_EXPAND in
            [r.kind for r in symbolic_rewrites.rewrites()]) == applied


@pytest.mark.parametrize("fn", [
    lambda x: (1 - (x > 0).long()).all(dim=-1, keepdim=True),  # MEGA's padding mask
    lambda x: (x > 0).long().sub(x.gt(1).long()).any(dim=1),  # -1 and 1 must not cancel
    lambda x: torch.stack([torch.round(x).long().all(), torch.round(x).long().any()]),
])
def test_export_any_all_non_bool_input_reads_nonzero_as_true(tmp_path, fn):
    model = _Lambda(fn).eval()
    path = tmp_path / "a.onnx"
    _export(model, (torch.randn(2, 3, 4),), path, ["x"])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch in (1, 7):
        x = rng.choice([-1.0, 0.0, 0.6, 2.0], size=(batch, 3, 4)).astype(np.float32)
        got = session.run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, fn(torch.from_numpy(x)).numpy())
    assert symbolic_rewrites.TRUTH_REDUCTION_BOOL in [r.kind for r in symbolic_rewrites.rewrites()]


@pytest.mark.parametrize("include_self", [False, True])
def test_export_scatter_reduce_every_form_matches_torch(tmp_path, include_self):
    """Every reduction along both dims (TAPAS's segment minima and means use
    include_self=False; GNN-style pooling), one model exporting them all."""
    from tfx_bridge.components.pytorch_model_importer.export import scatter_reduce

    reduces = ["sum", "prod", "mean", "amax", "amin"]

    def fn(x):
        # Rows of 4 scattered into 5 segments (segment 4 gets nothing: self stays).
        index = (x.abs() * 10).long() % 4
        outs = []
        for reduce in reduces:
            rows = torch.full((x.shape[0], 5), 0.5).scatter_reduce(
                1, index, x, reduce, include_self=include_self)
            cols = torch.full((5, 4), 0.5).scatter_reduce(
                0, index[:5], x[:5], reduce, include_self=include_self)
            outs += [rows.reshape(-1), cols.reshape(-1)]
        return torch.cat(outs)

    model = _Lambda(fn).eval()
    path = tmp_path / "s.onnx"
    _export(model, (torch.randn(6, 4),), path, ["x"])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (5, 7):
        x = torch.randn(batch, 4)
        np.testing.assert_allclose(session.run(None, {"x": x.numpy()})[0], fn(x).numpy(),
                                   rtol=1e-5, atol=1e-5)
    nodes = [r.nodes for r in symbolic_rewrites.rewrites()
             if r.kind == scatter_reduce.SCATTER_REDUCE_DENSE]
    dense = {n.split()[2] for n in (nodes[0] if nodes else [])}
    # torch's ScatterElements form stays for sum/prod with include_self=True.
    assert dense == ({"sum", "prod", "mean", "amax", "amin"} if not include_self
                     else {"mean", "amax", "amin"})


@pytest.mark.parametrize("fn", [
    # CPM-Ant's attention mask: int64 ids | (bool & bool), then & bool.
    lambda a, b: (a[:, None, :] | (a[:, :, None].logical_not() & (b[:, None, :] > 0)))
    & (b[:, None, :] == b[:, :, None]),
    lambda a, b: (a ^ (b * 7919)) & 1023,  # feature hashing on ids, negatives included
    lambda a, b: a.int() | b.int(),
    lambda a, b: ~a + (~(b > 0)).long(),
])
def test_export_bitwise_on_integers_exact(tmp_path, fn):
    from tfx_bridge.components.pytorch_model_importer.export import integer_bitwise

    model = nn.Module()
    model.forward = fn
    path = tmp_path / "b.onnx"
    rng = np.random.default_rng(1)

    def ids(batch):
        return tuple(torch.from_numpy(rng.integers(-300, 300, size=(batch, 6))) for _ in "ab")

    _export(model, ids(3), path, ["a", "b"])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 7):
        a, b = ids(batch)
        got = session.run(None, {"a": a.numpy(), "b": b.numpy()})[0]
        np.testing.assert_array_equal(got, fn(a, b).numpy())
    assert integer_bitwise.BITWISE_ARITHMETIC in [r.kind for r in symbolic_rewrites.rewrites()]
