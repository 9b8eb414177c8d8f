"""Detections that differ only by how ties fell (detection_ties.py), through
detection_verify.compare: a tie in another order, the other of two tied overlapping
boxes kept, and what still differs."""
from __future__ import annotations

import numpy as np

from tfx_bridge.components.pytorch_model_importer import detection_verify


def test_detection_compare_swapped_tie_tie_order_verdict():
    want = {"boxes": np.array([[0., 0, 4, 4], [5, 5, 9, 9]]), "labels": np.array([1, 2]),
            "scores": np.array([.5, .5], np.float32)}
    got = {k: v[::-1].copy() for k, v in want.items()}
    check = detection_verify.compare(want, got)
    assert check["verdict"] == detection_verify.TIE_ORDER
    assert check["tied_rows"] == [0, 1]
    got["scores"] = np.array([.5, .3], np.float32)
    assert detection_verify.compare(want, got)["verdict"] == "differs"


def test_detection_compare_other_of_tied_overlapping_boxes_kept_tie_order_verdict():
    # Three corner boxes of one label score the same; NMS keeps one of the two that
    # overlap (IoU 0.81), and the served model kept the other one.
    a, b, c = [0., 0, 14.6, 26.2], [0., 0, 21.4, 13.2], [0., 0, 17.8, 25.6]
    d = [40., 40, 60, 60]
    want = {"boxes": np.array([d, b, a]), "labels": np.array([3, 8, 8]),
            "scores": np.array([.9, .149428, .149428], np.float32)}
    got = {"boxes": np.array([d, c, b]), "labels": np.array([3, 8, 8]),
           "scores": np.array([.9, .1494277, .149428], np.float32)}
    check = detection_verify.compare(want, got)
    assert check["verdict"] == detection_verify.TIE_ORDER
    assert check["tied_rows"] == [1, 2]
    # Not tied, another label, or overlapping less than NMS could decide: a difference.
    for changed in ({"scores": np.array([.9, .1491, .149428], np.float32)},
                    {"labels": np.array([3, 7, 8])},
                    {"boxes": np.array([d, [0., 0, 30, 30], b])}):
        assert detection_verify.compare(want, {**got, **changed})["verdict"] == "differs"
