"""Detections that differ between two computations only by how ties fell.

Two float32 computations of a detector may order detections whose scores tie
within float rounding either way, and where two tied boxes of one label overlap,
non-maximum suppression keeps one of them: which one is the sort's choice. The
checks in ``detection_verify.py`` pass such a difference as ``tie-order`` and say
so. No TFX imports.
"""
from __future__ import annotations

import numpy as np

# Scores this close may come out of two float32 computations in either order.
TIE_ATOL = 1e-4
# Two tied detections of one label overlapping more than this are one NMS choice: the
# loosest threshold torchvision's detectors suppress at (0.45 to 0.7), so such a pair
# never both survive there.
NMS_TIE_IOU = 0.7


def explained(want, got, group, off, box_atol: float) -> bool:
    """Whether every detection out of place (``off``) is a tie in another order, or the
    other of two tied, overlapping boxes kept. ``group``: each reference row's tie group
    (consecutive scores within ``TIE_ATOL``)."""
    return _same_within_ties(want, got, group, off, box_atol) or _tied_choice(
        want, got, group, off, box_atol)


def _matcher(want, got, box_atol: float):
    """``(tied, same, iou)``: whether served row ``i`` and reference row ``j`` have one
    label and scores within ``TIE_ATOL`` (``tied``), and their boxes within ``box_atol``
    too (``same``: the same detection); ``iou``: their boxes' overlap."""
    labels_w, labels_g = np.asarray(want["labels"]), np.asarray(got["labels"])
    boxes_w, boxes_g = np.asarray(want["boxes"], np.float64), np.asarray(got["boxes"], np.float64)
    scores_w, scores_g = np.asarray(want["scores"]), np.asarray(got["scores"])

    def tied(i, j):
        return bool(labels_g[i] == labels_w[j]
                    and abs(float(scores_g[i]) - float(scores_w[j])) <= TIE_ATOL)

    def same(i, j):
        return tied(i, j) and bool(np.abs(boxes_g[i] - boxes_w[j]).max() <= box_atol)

    return tied, same, lambda i, j: _iou(boxes_g[i], boxes_w[j])


def _same_within_ties(want, got, group, off, box_atol: float) -> bool:
    """Every detection out of place has its match (label, box, score) among the
    reference's detections of its own tie group."""
    _, same, _ = _matcher(want, got, box_atol)
    for i in np.flatnonzero(off):
        peers = np.flatnonzero(group == group[i])
        if len(peers) < 2 or not any(same(i, j) for j in peers):
            return False
    return True


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = (max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
             * max(0.0, min(a[3], b[3]) - max(a[1], b[1])))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _tied_choice(want, got, group, off, box_atol: float) -> bool:
    """Every detection out of place is, within its tie group, either one of the
    reference's in another order, or paired one to one with a reference detection the
    served model lacks: same label, tied score, boxes overlapping by more than
    ``NMS_TIE_IOU``. Non-maximum suppression keeps one of two such boxes; with equal
    scores which one is the sort's choice, and the two computations chose differently.

    >>> a, b, c = [0., 0, 14.6, 26.2], [0., 0, 21.4, 13.2], [0., 0, 17.8, 25.6]
    >>> want = {"boxes": np.array([b, a]), "labels": np.array([8, 8]),
    ...         "scores": np.array([.149428, .149428], np.float32)}
    >>> got = {**want, "boxes": np.array([c, b])}
    >>> group, off = np.array([0, 0]), np.array([True, True])
    >>> _tied_choice(want, got, group, off, 1e-3)
    True
    >>> _tied_choice(want, {**got, "labels": np.array([7, 8])}, group, off, 1e-3)
    False
    """
    tied, same, iou = _matcher(want, got, box_atol)
    chosen = False
    for g in np.unique(group[off]):
        rows = np.flatnonzero(group == g)
        lone_got = [i for i in rows if not any(same(i, j) for j in rows)]
        lone_want = [j for j in rows if not any(same(i, j) for i in rows)]
        # A row out of place that matches its own position differs in another output
        # (a mask, keypoints): no choice between tied boxes explains that.
        if len(lone_got) != len(lone_want) or any(
                off[i] and same(i, i) for i in rows):
            return False
        chosen = chosen or bool(lone_got)
        for i in lone_got:
            overlap = {j: iou(i, j) for j in lone_want if tied(i, j)}
            partners = [j for j, iou in overlap.items() if iou > NMS_TIE_IOU]
            if not partners:
                return False
            lone_want.remove(max(partners, key=overlap.get))
    return chosen
