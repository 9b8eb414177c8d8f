"""torch.fft, torch.stft and complex arithmetic exported as real pairs and DFT
MatMuls (export/spectral.py): checked against torch through onnxruntime, an
FNet block and an STFT front-end through the whole importer."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer.export import (  # noqa: E402
    spectral,
    symbolic_rewrites,
)


def _module(fn) -> nn.Module:
    module = nn.Module()
    module.forward = fn
    return module.eval()


def _fft_conv(x):
    """MEGA's EMA convolution: rfft both, multiply, irfft, crop."""
    kernel = x.flip(-1) * 0.5
    n = 2 * x.shape[-1]
    return torch.fft.irfft(torch.fft.rfft(x, n=n) * torch.fft.rfft(kernel, n=n), n=n)[..., :8]


CASES = {
    "fftn_real": lambda x: torch.fft.fftn(x, dim=(1, 2)).real,  # FNet's token mixing
    "fft_abs": lambda x: torch.fft.fft(x).abs(),
    "fft_pad_imag": lambda x: torch.fft.fft(x, n=11, dim=1).imag,
    "fft_truncate": lambda x: torch.view_as_real(torch.fft.fft(x, n=5)),
    "rfft_conv": _fft_conv,
    "ifft_ortho_affine": lambda x: torch.view_as_real(
        torch.fft.ifft(torch.fft.fft(x, norm="ortho") * 2 + 1, norm="ortho")),
    "rfft2": lambda x: torch.view_as_real(torch.fft.rfft2(x)),
    "irfftn": lambda x: torch.fft.irfftn(torch.fft.rfftn(x), s=(6, 8)),
    "irfft_odd": lambda x: torch.fft.irfft(torch.fft.rfft(x[..., :7]), n=7),
    "complex_div_sub_conj": lambda x: torch.view_as_real(
        (torch.fft.fft(x) - torch.fft.fft(x * 2) / (torch.fft.fft(x) + 3)).conj()
        .resolve_conj()),
    "rsub_real_mul": lambda x: torch.view_as_real(2.0 - torch.fft.fft(x) * x),
    "forward_norm_transpose": lambda x: torch.view_as_real(
        torch.fft.fft(x, norm="forward").transpose(1, 2)),
    "polar_select_slice": lambda x: torch.view_as_real(
        torch.polar(x.abs(), x)[:, 1:4].select(1, 0).unsqueeze(0)),
    "float64": lambda x: torch.fft.rfft(x.double()).abs().float(),
}


def _export(fn, path, dynamic_length=False):
    axes = {"x": {0: "batch", 2: "length"} if dynamic_length else {0: "batch"},
            "y": {0: "batch"}}
    with symbolic_rewrites.onnx_symbolics(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_module(fn), (torch.randn(3, 6, 8),), str(path),
                          input_names=["x"], output_names=["y"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    onnx.checker.check_model(onnx.load(str(path)))
    return [r.kind for r in symbolic_rewrites.rewrites()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_spectral_fft_and_complex_ops_match_torch(tmp_path, name):
    fn = CASES[name]
    path = tmp_path / "f.onnx"
    assert spectral.FFT_MATMUL in _export(fn, path) or name == "polar_select_slice"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        x = torch.randn(batch, 6, 8)
        got = session.run(None, {"x": x.numpy()})[0]
        want = fn(x).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4 * max(1.0, np.abs(want).max()))


def test_export_spectral_dynamic_length_builds_dft_from_axis_size(tmp_path):
    fn = CASES["fftn_real"]
    path = tmp_path / "d.onnx"
    _export(fn, path, dynamic_length=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for length in (3, 8, 13):
        x = torch.randn(2, 6, length)
        np.testing.assert_allclose(session.run(None, {"x": x.numpy()})[0], fn(x).numpy(),
                                   atol=1e-4)


def test_export_spectral_traced_sizes_refused_by_name(tmp_path):
    # fftn's s computed from a dynamic axis: sizes must be constants to export.
    with pytest.raises(torch.onnx.errors.SymbolicValueError,
                       match="fftn sizes s must be constant"):
        _export(lambda x: torch.fft.rfftn(x, s=(6, x.shape[-1])).abs(), tmp_path / "n.onnx",
                dynamic_length=True)


def _hann(n: int):
    return torch.hann_window(n)


STFT_CASES = {
    "default": lambda x: torch.stft(x, 16, return_complex=True).abs(),
    "hann_hop_5": lambda x: torch.view_as_real(
        torch.stft(x, 16, hop_length=5, window=_hann(16), return_complex=True)),
    "short_window_odd_n": lambda x: torch.stft(
        x, 15, win_length=9, window=_hann(9), center=False, return_complex=True).abs(),
    "normalized_two_sided": lambda x: torch.view_as_real(torch.stft(
        x, 12, hop_length=3, normalized=True, onesided=False, return_complex=True)),
    "real_pairs_no_window": lambda x: torch.stft(x, 8, win_length=5, center=False,
                                                 return_complex=False),
    "constant_pad_power": lambda x: torch.stft(x, 16, pad_mode="constant",
                                               return_complex=True).abs().pow(2),
}


def _spectral_edit(x, n, **kw):
    """stft, a gain on the spectrum, istft: a denoiser's skeleton."""
    window = kw.pop("window", None)
    spec = torch.stft(x, n, window=window, return_complex=True,
                      **{k: v for k, v in kw.items() if k != "length"})
    return torch.istft(spec * 0.5, n, window=window, **kw)


STFT_CASES.update({
    "istft_roundtrip_hann": lambda x: _spectral_edit(x, 16, hop_length=4, window=_hann(16)),
    "istft_length_odd_n": lambda x: _spectral_edit(x, 15, hop_length=5, window=_hann(15),
                                                   length=43),
    "istft_two_sided_normalized": lambda x: _spectral_edit(
        x, 12, hop_length=3, window=_hann(12), onesided=False, normalized=True),
    "istft_short_window_no_window_not_centered": lambda x: _spectral_edit(
        x, 16, hop_length=4, win_length=12, window=_hann(12))[..., :40] + _spectral_edit(
        x, 8, hop_length=2, center=False)[..., :40],
})


@pytest.mark.parametrize("name", sorted(STFT_CASES))
@pytest.mark.parametrize("rank", [1, 2])
def test_export_stft_matches_torch_at_other_lengths(tmp_path, name, rank):
    """torch exports stft only as ONNX STFT, never with complex output."""
    fn = STFT_CASES[name]
    shape = (2, 50) if rank == 2 else (61,)
    path = tmp_path / "s.onnx"
    with symbolic_rewrites.onnx_symbolics(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_module(fn), (torch.randn(*shape),), str(path), input_names=["x"],
                          dynamic_axes={"x": {rank - 1: "time"}}, opset_version=17,
                          dynamo=False)
    assert ("istft" if name.startswith("istft") else "stft") in spectral.used()
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert "STFT" not in ops and "MatMul" in ops
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for length in (50, 73):
        x = torch.randn(*shape[:-1], length)
        got, want = session.run(None, {"x": x.numpy()})[0], fn(x).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5 * max(1.0, np.abs(want).max()))


class _FNetMixer(nn.Module):
    """FNet's encoder block: Fourier token mixing, then a feed-forward layer."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.ff = nn.Linear(16, 16)

    def forward(self, x):
        mixed = self.norm(x + torch.fft.fftn(x, dim=(1, 2)).real)
        return self.ff(mixed)


def _imported_as_torchscript(module, sample, spec: str, tmp_path):
    """The importer's result for ``module`` traced on ``sample`` and handed over as a
    TorchScript file; verify() runs the SavedModel in a fresh process with oneDNN off."""
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.pytorch_model_importer.source import ModelSource

    torch.manual_seed(0)
    path = str(tmp_path / "model.pt")
    with torch.no_grad():
        torch.jit.trace(module.eval(), (sample,)).save(path)
    config = ImporterConfig.of_source(ModelSource("torchscript", path), [spec], ["y"])
    result = convert.import_model(config, str(tmp_path / "out"))
    assert result.blessed, result.report["checks"]
    assert spectral.FFT_MATMUL in [r["kind"] for r in result.report["rewrites"]]
    assert result.report["converter"] == "tfx-bridge"
    return result


def test_import_fft_torchscript_converted_and_verified_onednn_off(tmp_path):
    _imported_as_torchscript(_FNetMixer(), torch.randn(2, 8, 16), "x:float32:-1,8,16",
                             tmp_path)


class _LogSpectrogram(nn.Module):
    """An audio front-end: a Hann-windowed STFT's log power, then a linear probe."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(32))
        self.probe = nn.Linear(17, 4)

    def forward(self, wave):
        spec = torch.stft(wave, 32, hop_length=8, window=self.window, return_complex=True)
        return self.probe(torch.log1p(spec.abs().pow(2)).transpose(1, 2))


def test_import_stft_front_end_torchscript_converted_and_verified_onednn_off(tmp_path):
    _imported_as_torchscript(_LogSpectrogram(), torch.randn(2, 400), "wave:float32:-1,400",
                             tmp_path)


class _SpectralDenoiser(nn.Module):
    """A learned gain per frequency bin between stft and istft (a speech denoiser's shape)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(32))
        self.gain = nn.Linear(17, 17)

    def forward(self, wave):
        spec = torch.stft(wave, 32, hop_length=8, window=self.window, return_complex=True)
        mask = torch.sigmoid(self.gain(spec.abs().transpose(1, 2))).transpose(1, 2)
        return torch.istft(spec * mask, 32, hop_length=8, window=self.window, length=400)


def test_import_stft_istft_denoiser_torchscript_converted_and_verified_onednn_off(tmp_path):
    _imported_as_torchscript(_SpectralDenoiser(), torch.randn(2, 400), "wave:float32:-1,400",
                             tmp_path)
