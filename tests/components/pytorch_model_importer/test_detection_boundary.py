"""Detections off only in a mask or keypoints whose box sits on the pixel boundary
that sizes them: named pixel-boundary, and only then."""
from __future__ import annotations

import numpy as np
import pytest

from tfx_bridge.components.pytorch_model_importer import detection_boundary, detection_verify


def _one_mask_detection(x2: float, right_col: int) -> dict:
    mask = np.zeros((1, 1, 60, 60), np.float32)
    mask[0, 0, 19:49, 9:right_col] = 0.9
    return {"boxes": np.array([[10., 20, x2, 48]]), "labels": np.array([1]),
            "scores": np.array([.9], np.float32), "masks": mask}


def test_detection_compare_mask_box_across_paste_boundary_pixel_boundary_verdict():
    # x2 = 38.9655 puts the expanded box's right edge at 40 px: the two boxes, 0.001 px
    # apart, paste into 39 and 40 px wide boxes.
    want, got = _one_mask_detection(38.9650, 40), _one_mask_detection(38.9660, 41)
    assert detection_boundary.paste_box(want["boxes"][0]) != \
        detection_boundary.paste_box(got["boxes"][0])
    check = detection_verify.compare(want, got)
    assert check["verdict"] == detection_verify.BOUNDARY
    assert check["boundary_rows"] == [{"row": 0, "outputs": ["masks"],
                                       "mask": [[8, 19, 39, 49], [8, 19, 40, 49]]}]
    assert "pixel boundary" in detection_verify.summary([check])


def test_detection_compare_mask_differs_same_paste_box_differs():
    want, got = _one_mask_detection(30.0, 40), _one_mask_detection(30.001, 41)
    assert detection_verify.compare(want, got)["verdict"] == "differs"


def test_detection_compare_boundary_with_label_off_differs():
    want, got = _one_mask_detection(38.9650, 40), _one_mask_detection(38.9660, 41)
    got["labels"] = np.array([2])
    assert detection_verify.compare(want, got)["verdict"] == "differs"


def test_detection_compare_keypoint_heatmap_across_ceil_boundary_needs_resized_frame():
    # 46.0337 and 46.0340 px high at 97 -> 118 rows: 55.9998 and 56.0002 in the resized
    # frame, decoded on heatmaps 56 and 57 rows high.
    def one(height, y):
        return {"boxes": np.array([[5., 10, 40, 10 + height]]), "labels": np.array([1]),
                "scores": np.array([.9], np.float32),
                "keypoints": np.array([[[20., y]]]),
                "keypoints_scores": np.array([[3.]], np.float32)}

    want, got = one(46.0337, 30.0), one(46.0340, 34.0)
    assert detection_verify.compare(want, got)["verdict"] == "differs"
    resized = (118 / 97, 160 / 131)
    check = detection_verify.compare(want, got, resized=resized)
    assert check["verdict"] == detection_verify.BOUNDARY
    assert check["boundary_rows"][0]["heatmap"] == [[43, 56], [43, 57]]
    assert detection_verify.compare(one(46.0, 30.0), one(46.0003, 34.0),
                                    resized=resized)["verdict"] == "differs"


def _resizing_graph(path, resize: bool = True, scales=(1.5, 1.5), constant_first=False,
                    weights_as_inputs=False) -> str:
    """An image model shaped as torchvision exports one: [3, H, W] in, unsqueezed and
    resized by ``scales`` (rows, columns) by its first Resize, then upsampled again.
    ``constant_first``: a Resize of a constant [1, 3, 4, 4] comes before any of the
    image's (its output added in at the end)."""
    import onnx
    from onnx import TensorProto, helper

    nodes, extra = [], []
    if constant_first:
        nodes.append(helper.make_node("Resize", ["lut", "", "twice"], ["lut_up"],
                                      mode="nearest"))
    nodes.append(helper.make_node("Unsqueeze", ["image", "axes"], ["batched"]))
    last = "batched"
    if resize:
        nodes += [helper.make_node("Resize", ["batched", "", "scales"], ["resized"],
                                   mode="linear"),
                  helper.make_node("Resize", ["resized", "", "twice"], ["up"], mode="nearest")]
        last = "up"
    nodes.append(helper.make_node("Squeeze", [last, "axes"], ["out"]))
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)]
    if constant_first:
        outputs.append(helper.make_tensor_value_info("lut_up", TensorProto.FLOAT, None))
        extra.append(helper.make_tensor("lut", TensorProto.FLOAT, [1, 3, 4, 4], [0.5] * 48))
    inits = [helper.make_tensor("axes", TensorProto.INT64, [1], [0]),
             helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, *scales]),
             helper.make_tensor("twice", TensorProto.FLOAT, [4], [1, 1, 2, 2])] + extra
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, [3, "h", "w"])]
    if weights_as_inputs:  # as exports with keep_initializers_as_inputs list them
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in inits]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def test_onnx_frame_first_resize_of_image_ratio(tmp_path):
    frame = detection_boundary.OnnxFrame(_resizing_graph(tmp_path / "m.onnx"))
    assert frame.ratio(np.zeros((10, 16, 3), np.uint8)) == (15 / 10, 24 / 16)
    assert frame.ratio(np.zeros((9, 13, 3), np.uint8)) == (13 / 9, 19 / 13)


@pytest.mark.parametrize("kwargs", [{"constant_first": True}, {"weights_as_inputs": True}],
                         ids=["constant_resized_first", "weights_listed_as_inputs"])
def test_onnx_frame_image_resize_found_in_other_graph_forms(tmp_path, kwargs):
    frame = detection_boundary.OnnxFrame(_resizing_graph(tmp_path / "m.onnx", **kwargs))
    assert frame.ratio(np.zeros((10, 16, 3), np.uint8)) == (15 / 10, 24 / 16)


def test_onnx_frame_aspect_changing_resize_none(tmp_path):
    # Not torchvision's transform, which scales both sides by one factor.
    frame = detection_boundary.OnnxFrame(_resizing_graph(tmp_path / "m.onnx",
                                                         scales=(1.5, 1.25)))
    assert frame.ratio(np.zeros((10, 16, 3), np.uint8)) is None


def test_onnx_frame_no_resize_none(tmp_path):
    frame = detection_boundary.OnnxFrame(_resizing_graph(tmp_path / "m.onnx", resize=False))
    assert frame.ratio(np.zeros((10, 16, 3), np.uint8)) is None


def test_onnx_frame_unreadable_file_none(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"\x08\x07garbage")
    assert detection_boundary.OnnxFrame(str(path)).ratio(
        np.zeros((10, 16, 3), np.uint8)) is None
