"""The converter's Resize on frame-sized float32 data, against onnxruntime and torch;
ONNX's node tests run in benchmarks/."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")
torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import tensorflow as tf  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tfx_bridge.onnx_tf import core  # noqa: E402


def _resize(x: np.ndarray, sizes=None, scales=None, dims=None, gathers=None, **attrs):
    """onnxruntime's and our Resize of ``x`` (sizes or scales as constants; ``dims``
    the declared input dims, None where dynamic; ``gathers`` collects the axes of the
    served graph's GatherV2 ops on the data)."""
    inits = [numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes")] if sizes else \
        [numpy_helper.from_array(np.asarray(scales, np.float32), "scales")]
    node = helper.make_node("Resize", ["x", "", "" if sizes else "scales"]
                            + (["sizes"] if sizes else []), ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                    list(dims or x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    converted = core.convert(model)
    got = converted.serve(tf.constant(x))[converted.output_names[0]].numpy()
    if gathers is not None:
        gathers.extend(int(tf.get_static_value(o.inputs[2]))
                       for o in converted.serve.graph.get_operations()
                       if o.type == "GatherV2" and o.inputs[0].dtype == tf.float32)
    return want, got


@pytest.mark.parametrize("out_hw", [(320, 426), (721, 961)])
def test_resize_linear_frame_sized_coordinates_as_onnxruntime_and_torch(out_hw):
    """Bilinear source coordinates computed in float32 from the float32 scale, as
    onnxruntime and torch compute them: exact float64 coordinates differ from both by
    up to 1e-4 on a noisy 480x640 frame (the scale 426/640 is not a float32)."""
    x = np.random.default_rng(0).normal(0, 1, (1, 3, 480, 640)).astype(np.float32)
    want, got = _resize(x, sizes=[1, 3, *out_hw], mode="linear")
    expected = torch.nn.functional.interpolate(torch.from_numpy(x), size=out_hw,
                                               mode="bilinear", align_corners=False).numpy()
    assert got.shape == want.shape == (1, 3, *out_hw)
    assert np.abs(got - want).max() < 5e-6
    assert np.abs(got - expected).max() <= np.abs(want - expected).max() + 5e-6


def test_resize_nearest_scales_indices_as_onnxruntime():
    # Distinct whole numbers: equal outputs are the same source pixels picked.
    x = np.arange(2 * 97 * 131, dtype=np.float32).reshape(1, 2, 97, 131)
    want, got = _resize(x, scales=[1, 1, 2.0, 1.7], mode="nearest")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("rows,declared,transposed", [
    (9, [1, 2, None, None], True), (8, [1, 2, 8, 37], True), (4, [1, 2, 4, 37], False)])
def test_resize_last_axis_gathers_rows_of_swapped_axes_as_onnxruntime(mode, rows, declared,
                                                                      transposed):
    """The last axis is resampled with the last two swapped (a row per index instead
    of an element) unless the rows are known to be short; values as onnxruntime's."""
    x = np.random.default_rng(rows).normal(0, 1, (1, 2, rows, 37)).astype(np.float32)
    gathers = []
    want, got = _resize(x, scales=[1, 1, 1.0, 1.7], dims=declared, gathers=gathers,
                        mode=mode)
    assert got.shape == want.shape == (1, 2, rows, 62)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5)  # cubic's 4 taps
    assert set(gathers) == ({2} if transposed else {3})
