"""The converter's detection ops (NonMaxSuppression, RoiAlign) at odd shapes, against
torchvision's own ops and onnxruntime; ONNX's node tests run in benchmarks/."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")
torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
tv_ops = pytest.importorskip("torchvision.ops", reason="needs the [zoo] extra (torchvision)")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import tensorflow as tf  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from tfx_bridge.onnx_tf import core  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(node, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph([node], "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _run_both(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    converted = core.convert(model)
    out = converted.serve(*[tf.constant(v) for v in feeds.values()])
    return want, out[converted.output_names[0]].numpy()


def _boxes(rng, batches, count, size=40.0):
    """Corner boxes [y1, x1, y2, x2], some with their corners given in reverse order."""
    y, x = rng.uniform(0, size, (2, batches, count))
    h, w = rng.uniform(2, size / 3, (2, batches, count))
    boxes = np.stack([y, x, y + h, x + w], -1).astype(np.float32)
    flip = rng.random((batches, count)) < 0.2
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes


def _nms_model(center=0, dims=("b", "n", "c")):
    b, n, c = dims
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"],
                            ["selected"], center_point_box=center)
    return _model(node,
                  [helper.make_tensor_value_info("boxes", F, [b, n, 4]),
                   helper.make_tensor_value_info("scores", F, [b, c, n]),
                   helper.make_tensor_value_info("max_out", I64, [1]),
                   helper.make_tensor_value_info("iou", F, [1]),
                   helper.make_tensor_value_info("thr", F, [1])],
                  [helper.make_tensor_value_info("selected", I64, [None, 3])])


def _nms_feeds(boxes, scores, max_out, iou, thr):
    return {"boxes": boxes, "scores": scores, "max_out": np.array([max_out], np.int64),
            "iou": np.array([iou], np.float32), "thr": np.array([thr], np.float32)}


@pytest.mark.parametrize("batches,count,classes,max_out,iou,thr", [
    (2, 37, 3, 5, 0.45, 0.2), (1, 1, 1, 3, 0.5, 0.0), (3, 53, 2, 9223372036854775807, 0.3, 0.5),
    (2, 17, 4, 0, 0.5, 0.1)])
def test_non_max_suppression_odd_shapes_matches_torchvision_nms_and_onnxruntime(
        batches, count, classes, max_out, iou, thr):
    rng = np.random.default_rng(count)
    boxes = _boxes(rng, batches, count)
    scores = rng.permutation(batches * classes * count).reshape(batches, classes, count)
    scores = (scores / scores.size).astype(np.float32)  # distinct: torchvision's ties differ
    feeds = _nms_feeds(boxes, scores, max_out, iou, thr)
    want, got = _run_both(_nms_model(), feeds)
    np.testing.assert_array_equal(got, want)
    expected = []
    for b in range(batches):
        # torchvision takes [x1, y1, x2, y2] with x1 <= x2: the same boxes, IoU unchanged.
        y1, x1, y2, x2 = np.moveaxis(boxes[b], -1, 0)
        xyxy = torch.from_numpy(np.stack([np.minimum(x1, x2), np.minimum(y1, y2),
                                          np.maximum(x1, x2), np.maximum(y1, y2)], -1))
        for c in range(classes):
            s = torch.from_numpy(scores[b, c])
            keep = torch.nonzero(s > thr).flatten()
            picked = keep[tv_ops.nms(xyxy[keep], s[keep], iou)][:max_out]
            expected += [[b, c, int(i)] for i in picked]
    np.testing.assert_array_equal(got.reshape(-1, 3), np.array(expected, np.int64).reshape(-1, 3))


def test_non_max_suppression_center_boxes_equal_scores_lower_index_first():
    rng = np.random.default_rng(3)
    corners = _boxes(rng, 1, 29)[0]
    y1, x1, y2, x2 = np.moveaxis(corners, -1, 0)
    center = np.stack([(x1 + x2) / 2, (y1 + y2) / 2, np.abs(x2 - x1), np.abs(y2 - y1)], -1)
    scores = np.round(rng.uniform(0, 1, (1, 2, 29)), 1).astype(np.float32)  # many ties
    feeds = _nms_feeds(center[None].astype(np.float32), scores, 7, 0.4, 0.05)
    want, got = _run_both(_nms_model(center=1), feeds)
    np.testing.assert_array_equal(got, want)
    assert len(got) > 7


def _roi_model(mode, transform, ratio, out_hw, scale, opset=17):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode,
                            coordinate_transformation_mode=transform, sampling_ratio=ratio,
                            output_height=out_hw[0], output_width=out_hw[1],
                            spatial_scale=scale)
    return _model(node,
                  [helper.make_tensor_value_info("x", F, [None, 5, 11, 13]),
                   helper.make_tensor_value_info("rois", F, [None, 4]),
                   helper.make_tensor_value_info("batch", I64, [None])],
                  [helper.make_tensor_value_info("y", F, None)], opset=opset)


def _roi_feeds(rng):
    x = rng.standard_normal((3, 5, 11, 13)).astype(np.float32)
    x1, y1 = rng.uniform(-6, 20, (2, 9))
    w, h = rng.uniform(0, 22, (2, 9))
    rois = np.stack([x1, y1, x1 + w, y1 + h], -1).astype(np.float32)
    rois[0] = [30, 30, 40, 44]  # past the border: samples outside count as zero
    rois[1] = [3, 4, 3, 4]  # a point
    return {"x": x, "rois": rois, "batch": rng.integers(0, 3, 9).astype(np.int64)}


@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2, 3])
def test_roi_align_avg_odd_shapes_matches_torchvision_roi_align_and_onnxruntime(transform,
                                                                                 ratio):
    rng = np.random.default_rng(ratio)
    feeds = _roi_feeds(rng)
    want, got = _run_both(_roi_model("avg", transform, ratio, (3, 5), 0.5), feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    boxes = torch.from_numpy(np.concatenate([feeds["batch"][:, None].astype(np.float32),
                                             feeds["rois"]], 1))
    ref = tv_ops.roi_align(torch.from_numpy(feeds["x"]), boxes, (3, 5), spatial_scale=0.5,
                           sampling_ratio=ratio if ratio else -1,
                           aligned=transform == "half_pixel")
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,ratio,resampled", [("avg", 2, True), ("avg", 0, False),
                                                  ("max", 2, False)])
def test_roi_align_fixed_grid_average_samples_with_crop_and_resize(mode, ratio, resampled):
    converted = core.convert(_roi_model(mode, "half_pixel", ratio, (3, 5), 0.5))
    types = {o.type for o in converted.serve.graph.get_operations()}
    assert ("CropAndResize" in types) == resampled
    assert ("GatherV2" in types) != resampled


@pytest.mark.parametrize("transform,roi,out_h", [
    ("output_half_pixel", [0, 4, 6, 6], 1),  # a sample on y == 5, the map's extent
    ("half_pixel", [0, -1.75, 6, 5.75], 3),  # a sample on y == -1
    ("output_half_pixel", [-2.75, -2.5, 4.5, 6.5], 1),  # both, and x past -1
    ("half_pixel", [4, 7, -2, -2], 1)])  # corners in reverse order
@pytest.mark.parametrize("ratio,dims,boxes", [(3, [1, 2, 5, 6], 2),
                                              (2, [None, None, None, None], None)])
def test_roi_align_samples_on_the_border_count_as_onnxruntime(transform, roi, out_h, ratio,
                                                              dims, boxes):
    """ONNX keeps a sample lying exactly on -1 or on the map's extent (at the border's
    value) and drops one beyond; rounding in the resampled form, or Grappler
    reassociating the position arithmetic, must not move it across."""
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 6)).astype(np.float32) + 3
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode="avg",
                            coordinate_transformation_mode=transform, sampling_ratio=ratio,
                            output_height=out_h, output_width=1)
    model = _model(node, [helper.make_tensor_value_info("x", F, dims),
                          helper.make_tensor_value_info("rois", F, [boxes, 4]),
                          helper.make_tensor_value_info("batch", I64, [boxes])],
                   [helper.make_tensor_value_info("y", F, None)])
    feeds = {"x": x, "rois": np.array([roi, [0, 0, 6, 5]], np.float32),
             "batch": np.zeros(2, np.int64)}
    want, got = _run_both(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_roi_align_resampled_half_precision_and_no_boxes_as_onnxruntime():
    x = np.random.default_rng(4).standard_normal((2, 3, 9, 7)).astype(np.float16)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode="avg",
                            sampling_ratio=2, output_height=2, output_width=3,
                            spatial_scale=0.5)
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3, 9, 7]),
                          helper.make_tensor_value_info("rois", TensorProto.FLOAT16, [None, 4]),
                          helper.make_tensor_value_info("batch", I64, [None])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)])
    rois = np.array([[1, 2, 11, 15], [-3, 0, 4, 20]], np.float16)
    want, got = _run_both(model, {"x": x, "rois": rois, "batch": np.array([1, 0])})
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=5e-3)
    want, got = _run_both(model, {"x": x, "rois": rois[:0], "batch": np.zeros(0, np.int64)})
    assert got.shape == want.shape == (0, 3, 2, 3)


@pytest.mark.parametrize("transform,ratio", [("half_pixel", 0), ("output_half_pixel", 2)])
def test_roi_align_max_matches_onnxruntime(transform, ratio):
    feeds = _roi_feeds(np.random.default_rng(7))
    want, got = _run_both(_roi_model("max", transform, ratio, (2, 3), 1.0), feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_roi_align_opset_10_uses_output_half_pixel_rule():
    feeds = _roi_feeds(np.random.default_rng(11))
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode="avg",
                            sampling_ratio=0, output_height=2, output_width=2,
                            spatial_scale=0.25)
    model = _model(node, [helper.make_tensor_value_info("x", F, [None, 5, 11, 13]),
                          helper.make_tensor_value_info("rois", F, [None, 4]),
                          helper.make_tensor_value_info("batch", I64, [None])],
                   [helper.make_tensor_value_info("y", F, None)], opset=10)
    want, got = _run_both(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class _TinyDetector(torch.nn.Module):
    """Per-cell boxes and class scores from a conv, filtered by torchvision's
    batched_nms: the post-processing a single-stage detector exports."""

    def __init__(self):
        super().__init__()
        self.pred = torch.nn.Conv2d(3, 4 + 3, 3, stride=4, padding=1)

    def forward(self, image):
        p = self.pred(image[None])[0].flatten(1).T  # [cells, 7]
        xy = torch.sigmoid(p[:, :2]) * 20
        wh = torch.exp(p[:, 2:4].clamp(max=2)) * 4
        boxes = torch.cat([xy - wh / 2, xy + wh / 2], 1)
        scores, labels = torch.sigmoid(p[:, 4:]).max(1)
        keep = tv_ops.batched_nms(boxes, scores, labels, 0.4)[:9]
        return boxes[keep], labels[keep], scores[keep]


def test_exported_batched_nms_detector_matches_onnxruntime_at_two_image_sizes(tmp_path):
    torch.manual_seed(0)
    path = str(tmp_path / "det.onnx")
    with torch.no_grad():
        torch.onnx.export(_TinyDetector().eval(), (torch.rand(3, 23, 31),), path,
                          input_names=["image"], output_names=["boxes", "labels", "scores"],
                          opset_version=17, dynamo=False,
                          dynamic_axes={"image": {1: "h", 2: "w"}, "boxes": {0: "n"},
                                        "labels": {0: "n"}, "scores": {0: "n"}})
    model = onnx.load(path)
    ops = {n.op_type for n in model.graph.node}
    ops |= {sub.op_type for n in model.graph.node for a in n.attribute for sub in a.g.node}
    assert "NonMaxSuppression" in ops
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    converted = core.convert(model)
    for h, w in ((23, 31), (17, 42)):
        image = np.random.default_rng(h).random((3, h, w), dtype=np.float32)
        want = session.run(None, {"image": image})
        out = converted.serve(tf.constant(image))
        got = [out[n].numpy() for n in converted.output_names]
        assert got[0].shape == want[0].shape and len(want[0]) > 1
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-6)
