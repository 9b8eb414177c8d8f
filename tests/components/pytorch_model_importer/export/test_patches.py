"""F.fold exported below opset 18 as a ConvTranspose with one-hot kernels
(export/patches.py): against torch through onnxruntime at odd kernels, strides,
dilations and paddings (overlapping windows, rows no block reaches), and an
unfold/fold patch model through the whole importer."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
ort = pytest.importorskip("onnxruntime")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from tfx_bridge.components.pytorch_model_importer.export import (  # noqa: E402
    patches,
    symbolic_rewrites,
)

# (channels, output size, kernel, dilation, padding, stride)
CASES = {
    "overlap_3x3_stride_1": (2, (5, 6), (3, 3), 1, 1, 1),
    "non_overlap_2x2": (3, (4, 6), (2, 2), 1, 0, 2),
    "odd_kernel_stride_2_remainder": (1, (7, 8), (3, 2), 1, 0, 2),
    "dilated_padded": (2, (9, 7), (2, 3), (2, 1), (1, 2), (2, 3)),
}


def _pair(v) -> tuple:
    return v if isinstance(v, tuple) else (v, v)


def _blocks(size, kernel, dilation, padding, stride) -> int:
    pair = _pair
    (d0, d1), (p0, p1), (s0, s1) = pair(dilation), pair(padding), pair(stride)
    return (((size[0] + 2 * p0 - d0 * (kernel[0] - 1) - 1) // s0 + 1)
            * ((size[1] + 2 * p1 - d1 * (kernel[1] - 1) - 1) // s1 + 1))


class _Fold(nn.Module):
    def __init__(self, size, kernel, dilation, padding, stride):
        super().__init__()
        self.args = dict(output_size=size, kernel_size=kernel, dilation=dilation,
                         padding=padding, stride=stride)

    def forward(self, columns):
        return F.fold(columns * 2, **self.args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_fold_opset_17_matches_torch(tmp_path, name):
    channels, size, kernel, dilation, padding, stride = CASES[name]
    model = _Fold(size, kernel, dilation, padding, stride).eval()
    shape = (channels * kernel[0] * kernel[1], _blocks(size, kernel, dilation, padding, stride))
    path = str(tmp_path / "f.onnx")
    with symbolic_rewrites.onnx_symbolics(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, *shape),), path, input_names=["c"],
                          dynamic_axes={"c": {0: "batch"}}, opset_version=17, dynamo=False)
    assert patches.used() == [f"{kernel[0]}x{kernel[1]} -> {size[0]}x{size[1]}"]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        columns = torch.randn(batch, *shape)
        np.testing.assert_allclose(session.run(None, {"c": columns.numpy()})[0],
                                   model(columns).numpy(), rtol=1e-5, atol=1e-5)


class _PatchMixer(nn.Module):
    """Overlapping 3x3 patches (unfold), mixed per patch, folded back and normalised by
    how many patches cover each pixel: a patch-based denoiser's skeleton."""

    def __init__(self):
        super().__init__()
        self.mix = nn.Linear(2 * 9, 2 * 9)

    def forward(self, image):
        cols = F.unfold(image, 3, padding=1)
        mixed = self.mix(cols.transpose(1, 2)).transpose(1, 2)
        covered = F.fold(torch.ones_like(cols), (10, 12), 3, padding=1)
        return F.fold(mixed, (10, 12), 3, padding=1) / covered


def test_import_unfold_fold_model_converted_and_verified_onednn_off(tmp_path):
    from tfx_bridge.components.pytorch_model_importer import convert
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.pytorch_model_importer.source import ModelSource

    torch.manual_seed(0)
    path = str(tmp_path / "mixer.pt")
    with torch.no_grad():
        torch.jit.trace(_PatchMixer().eval(), (torch.randn(2, 2, 10, 12),)).save(path)
    config = ImporterConfig.of_source(ModelSource("torchscript", path),
                                      ["image:float32:-1,2,10,12"], ["y"])
    result = convert.import_model(config, str(tmp_path / "out"))
    assert result.blessed, result.report["checks"]
    assert patches.FOLD_CONV_TRANSPOSE in [r["kind"] for r in result.report["rewrites"]]
    assert result.report["converter"] == "tfx-bridge"
