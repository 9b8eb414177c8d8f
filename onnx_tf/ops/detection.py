"""ONNX detection ops (see onnx_tf/core.py for the handler contract): NonMaxSuppression
and RoiAlign, in ONNX's semantics on stock TF Serving CPU kernels.

NonMaxSuppression runs TF's own greedy NMS kernel (``NonMaxSuppressionV4``), whose
rules are ONNX's: candidates are boxes scoring strictly above the score threshold,
taken by descending score with the lower box index first on equal scores; a box is
suppressed when its IoU with a kept box is strictly above the IoU threshold; a box of
zero area suppresses nothing; either corner pair order is accepted. Center-format
boxes are turned into corners with the arithmetic ONNX's reference uses.

RoiAlign averages (or takes the max of) a grid of bilinear samples per output cell.
With a fixed ``sampling_ratio`` and ``avg`` (torchvision's MultiScaleRoIAlign), TF's
``crop_and_resize`` samples the whole grid in one kernel and an average pool takes
each cell's mean. Otherwise (``sampling_ratio=0``: a grid per box; ``max``: ONNX
takes the max of each sample's weighted corners) the samples are gathered.
"""
from __future__ import annotations

from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- NMS


def _scalar(node, i: int, dtype, default):
    """Optional scalar input ``i`` (absent or empty means ``default``)."""
    tf = _tf()
    if not node.has(i):
        return tf.constant(default, dtype)
    value = tf.concat([tf.reshape(tf.cast(node.t(i), dtype), [-1]),
                       tf.constant([default], dtype)], 0)
    return value[0]  # an empty tensor: the default


def _corners(boxes, center: bool):
    """[..., 4] boxes as TF's [y1, x1, y2, x2] corners."""
    tf = _tf()
    if not center:
        return boxes
    xc, yc, w, h = tf.unstack(boxes, axis=-1)
    half_w, half_h = w / 2, h / 2
    return tf.stack([yc - half_h, xc - half_w, yc + half_h, xc + half_w], axis=-1)


@op("NonMaxSuppression", attrs={"center_point_box": 0})
def non_max_suppression(node):
    tf = _tf()
    center = int(node.attr("center_point_box") or 0)
    if center not in (0, 1):
        node.refuse(f"center_point_box={center}", "use 0 (corners) or 1 (center, size)")
    boxes = _corners(tf.cast(node.t(0), tf.float32), bool(center))
    scores = tf.cast(node.t(1), tf.float32)
    max_out = _scalar(node, 2, tf.int64, 0)
    iou = _scalar(node, 3, tf.float32, 0.0)
    score_threshold = _scalar(node, 4, tf.float32, float("-inf"))
    shape = tf.shape(scores, out_type=tf.int64)
    batches, classes, count = shape[0], shape[1], shape[2]
    # A huge max (torch exports sys.maxsize) pads to the box count, never past it.
    keep = tf.cast(tf.maximum(tf.minimum(max_out, count), 0), tf.int32)
    flat_boxes = tf.repeat(boxes, tf.cast(classes, tf.int32), axis=0)  # [B*C, N, 4]
    flat_scores = tf.reshape(scores, [-1, tf.shape(scores)[2]])  # [B*C, N]

    def one(args):
        b, s = args
        picked, valid = tf.raw_ops.NonMaxSuppressionV4(
            boxes=b, scores=s, max_output_size=keep, iou_threshold=iou,
            score_threshold=score_threshold, pad_to_max_output_size=True)
        return picked, valid

    picked, valid = tf.map_fn(
        one, (flat_boxes, flat_scores),
        fn_output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32)))
    pairs = tf.range(batches * classes)  # b-major, then class: ONNX's output order
    width = tf.shape(picked)[1]
    b_idx = tf.broadcast_to((pairs // classes)[:, None], tf.shape(picked, out_type=tf.int64))
    c_idx = tf.broadcast_to((pairs % classes)[:, None], tf.shape(picked, out_type=tf.int64))
    triples = tf.stack([b_idx, c_idx, tf.cast(picked, tf.int64)], axis=-1)
    mask = tf.range(width)[None, :] < valid[:, None]
    return tf.reshape(tf.boolean_mask(triples, mask), [-1, 3])


# --------------------------------------------------------------------------- RoiAlign


def _sample_positions(tf, start, size, bins: int, grid, grid_max):
    """[R, bins, G] sample positions along one axis, in the order of ONNX's arithmetic
    (``start + cell * bin + (step + 0.5) * bin / grid``). The divisions are
    ``divide_no_nan`` (no divisor is 0): Grappler's constant folding pushes constants
    through Mul and Div (``(c1 * x) / c2`` to ``(c1 / c2) * x``), which rounds
    differently and moves a sample lying exactly on -1 or on the map's extent across
    ONNX's border test (5.0 became 5.0000005)."""
    dtype = start.dtype
    bin_size = tf.math.divide_no_nan(size, tf.cast(bins, dtype))  # [R]
    cells = tf.cast(tf.range(bins), dtype)
    steps = tf.cast(tf.range(grid_max), dtype)
    grid_f = tf.cast(grid, dtype)
    offsets = tf.math.divide_no_nan((steps[None, None, :] + 0.5) * bin_size[:, None, None],
                                    grid_f[:, None, None])
    return start[:, None, None] + cells[None, :, None] * bin_size[:, None, None] + offsets


def _axis_samples(tf, start, size, bins: int, grid, grid_max, extent, dtype):
    """Sample coordinates along one axis: [R, bins, G] positions, their low/high
    pixel, the low/high weights and whether each sample counts (in the box's grid and
    not past the border ONNX ignores)."""
    pos = _sample_positions(tf, start, size, bins, tf.maximum(grid, 1), grid_max)
    extent_f = tf.cast(extent, dtype)
    inside = tf.logical_and(pos >= -1.0, pos <= extent_f)
    in_grid = tf.range(grid_max)[None, None, :] < grid[:, None, None]
    pos = tf.maximum(pos, 0.0)
    low = tf.cast(tf.floor(pos), tf.int64)
    last = tf.cast(extent, tf.int64) - 1
    at_edge = low >= last
    low = tf.where(at_edge, last, low)
    high = tf.where(at_edge, last, low + 1)
    pos = tf.where(at_edge, tf.cast(low, dtype), pos)
    frac = pos - tf.cast(low, dtype)
    return low, high, 1.0 - frac, frac, inside, in_grid


def _roi_align_resampled(tf, x, start, size, grids, batch, out_hw, ratio: int, extent):
    """Average RoiAlign on a fixed ``ratio`` x ``ratio`` grid per cell (``grids``: the
    per-box [R] grid of each axis, ``ratio`` everywhere), [R, oh, ow, C].

    ``crop_and_resize`` samples ``n`` evenly spaced points from a box's first to its
    last normalized coordinate, scaled by the image's extent minus one; the box is
    chosen so that those points are RoiAlign's sample positions. ONNX clamps a sample
    up to one pixel outside the map to the border and ignores one further out. The
    map is padded by two copies of its border, so every sample ONNX keeps reads the
    border's value even where the normalized round trip moves it by a rounding step,
    and the samples ONNX ignores are zeroed by a mask computed from the positions as
    ONNX computes them (``crop_and_resize`` zeroes only samples outside its image).
    The average pool then takes each cell's mean.
    """
    # SYMMETRIC padding of 1 repeats the edge; twice, also on a map one pixel wide.
    padded = x
    for _ in range(2):
        padded = tf.pad(padded, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC")
    corners, keep = [], []
    for first, length, grid, bins, dim in zip(start, size, grids, out_hw, extent,
                                              strict=True):
        pos = tf.reshape(_sample_positions(tf, first, length, bins, grid, ratio),
                         [-1, bins * ratio])  # [R, n]
        keep.append(tf.logical_and(pos >= -1.0, pos <= tf.cast(dim, pos.dtype)))
        # The first and last samples, + 2 for the padded rows/columns before the map,
        # over the padded map's extent minus one.
        last = tf.cast(dim + 3, pos.dtype)
        corners.append(((pos[:, 0] + 2.0) / last, (pos[:, -1] + 2.0) / last))
    boxes = tf.stack([corners[0][0], corners[1][0], corners[0][1], corners[1][1]], 1)
    crops = tf.image.crop_and_resize(padded, boxes, tf.cast(batch, tf.int32),
                                     [out_hw[0] * ratio, out_hw[1] * ratio])
    inside = tf.logical_and(keep[0][:, :, None, None], keep[1][:, None, :, None])
    crops = tf.where(inside, crops, tf.zeros([], crops.dtype))
    return tf.nn.avg_pool2d(crops, ratio, ratio, "VALID")


@op("RoiAlign", attrs={"coordinate_transformation_mode": "half_pixel", "mode": "avg",
                       "output_height": 1, "output_width": 1, "sampling_ratio": 0,
                       "spatial_scale": 1.0})
def roi_align(node):
    tf = _tf()
    mode = node.attr("mode")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    transform = node.attr("coordinate_transformation_mode")
    transform = transform.decode() if isinstance(transform, bytes) else transform
    if node.opset < 16:
        transform = "output_half_pixel"  # RoiAlign-10 had no attribute: its rule
    if mode not in ("avg", "max"):
        node.refuse(f"mode={mode}", "use avg or max")
    if transform not in ("half_pixel", "output_half_pixel"):
        node.refuse(f"coordinate_transformation_mode={transform}",
                    "use half_pixel or output_half_pixel")
    oh, ow = int(node.attr("output_height")), int(node.attr("output_width"))
    ratio = int(node.attr("sampling_ratio"))
    scale = float(node.attr("spatial_scale"))
    x = node.held_as(0, [0, 2, 3, 1])  # NHWC: one gather brings every channel
    dtype = x.dtype if x.dtype in (tf.float32, tf.float64) else tf.float32
    x = tf.cast(x, dtype)
    rois = tf.cast(node.t(1), dtype)
    batch = tf.cast(tf.reshape(node.t(2), [-1]), tf.int64)
    dims = tf.shape(x, out_type=tf.int64)
    height, width, channels = dims[1], dims[2], dims[3]
    offset = 0.5 if transform == "half_pixel" else 0.0
    x1, y1, x2, y2 = (rois[:, i] * scale - offset for i in range(4))
    roi_w, roi_h = x2 - x1, y2 - y1
    if transform == "output_half_pixel":
        roi_w, roi_h = tf.maximum(roi_w, 1.0), tf.maximum(roi_h, 1.0)
    if ratio > 0:
        grid_h = tf.fill(tf.shape(batch), tf.cast(ratio, tf.int64))
        grid_w = grid_h
    else:
        grid_h = tf.cast(tf.math.ceil(roi_h / oh), tf.int64)
        grid_w = tf.cast(tf.math.ceil(roi_w / ow), tf.int64)
    if mode == "avg" and ratio > 0 and dtype == tf.float32:  # crop_and_resize: float32
        out = _roi_align_resampled(tf, x, (y1, x1), (roi_h, roi_w), (grid_h, grid_w), batch,
                                   (oh, ow), ratio, (height, width))
        return tf.cast(tf.transpose(out, [0, 3, 1, 2]), node.t(0).dtype)
    one = tf.ones([1], tf.int64)  # no box: a grid of one
    gh_max = tf.reduce_max(tf.concat([grid_h, one], 0))
    gw_max = tf.reduce_max(tf.concat([grid_w, one], 0))
    ylo, yhi, wy_lo, wy_hi, y_in, y_grid = _axis_samples(tf, y1, roi_h, oh, grid_h, gh_max,
                                                         height, dtype)
    xlo, xhi, wx_lo, wx_hi, x_in, x_grid = _axis_samples(tf, x1, roi_w, ow, grid_w, gw_max,
                                                         width, dtype)
    # Broadcast to [R, oh, Gh, ow, Gw].
    def yv(t):
        return t[:, :, :, None, None]

    def xv(t):
        return t[:, None, None, :, :]

    inside = tf.logical_and(yv(y_in), xv(x_in))
    counted = tf.logical_and(yv(y_grid), xv(x_grid))
    if mode == "avg":  # samples outside the grid weigh 0, as those past the border do
        inside = tf.logical_and(inside, counted)
    flat = tf.reshape(x, [-1, channels])
    base = batch[:, None, None, None, None] * height * width
    acc = None  # one [R, oh, Gh, ow, Gw, C] temporary at a time: R can be 1000 boxes
    for yi, wy in ((ylo, wy_lo), (yhi, wy_hi)):
        for xi, wx in ((xlo, wx_lo), (xhi, wx_hi)):
            w = tf.where(inside, yv(wy) * xv(wx), tf.zeros([], dtype))
            v = tf.gather(flat, base + yv(yi) * width + xv(xi))
            part = w[..., None] * v
            if mode == "avg":
                # One axis at a time: TF's CPU Sum over the two non-adjacent grid
                # axes at once ran 2-3x slower than two single-axis sums.
                part = tf.reduce_sum(tf.reduce_sum(part, axis=4), axis=2)
                acc = part if acc is None else acc + part
            else:
                acc = part if acc is None else tf.maximum(acc, part)
    if mode == "avg":
        count = tf.cast(tf.maximum(grid_h * grid_w, 1), dtype)
        out = acc / count[:, None, None, None]
    else:
        best = tf.where(counted[..., None], acc, tf.constant(dtype.min, dtype))
        out = tf.reduce_max(best, axis=[2, 4])
        any_sample = tf.reduce_any(counted, axis=[2, 4])[..., None]
        out = tf.where(any_sample, out, tf.zeros([], dtype))  # no sample: ONNX's 0
    out = tf.transpose(out, [0, 3, 1, 2])  # [R, C, oh, ow]
    return tf.cast(out, node.t(0).dtype)
