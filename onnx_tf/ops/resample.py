"""ONNX Resize and Upsample: ONNX's source coordinates computed per axis and
gathered/interpolated on the NC<spatial> tensor (no tf.image kernels, whose
coordinate conventions differ); GridSample is in grid_sample.py."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.check import NodeInfo
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.spatial import FLOATS
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- Resize


_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
_SCALE_ONE_SAME = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                   "align_corners", "asymmetric")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _check_resize(info: NodeInfo) -> Optional[str]:
    a = info.attrs
    mode = a.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic", "bilinear", "trilinear"):
        return f"mode={mode!r} is not supported"
    if a.get("coordinate_transformation_mode", "half_pixel") not in _COORD_MODES:
        return f"coordinate_transformation_mode={a['coordinate_transformation_mode']!r} " \
               "is not supported"
    if a.get("nearest_mode", "round_prefer_floor") not in _NEAREST_MODES:
        return f"nearest_mode={a['nearest_mode']!r} is not supported"
    if a.get("keep_aspect_ratio_policy", "stretch") not in ("stretch", "not_larger",
                                                            "not_smaller"):
        return f"keep_aspect_ratio_policy={a['keep_aspect_ratio_policy']!r} is not supported"
    if a.get("antialias"):
        return "antialias=1 is not supported"
    return None


def _resize_axis(x, axis: int, in_len, out_len, scale, roi_start, roi_end, attrs,
                 compute):
    """Resamples ``x`` along ``axis`` with ONNX's coordinate formula for this axis.
    ``in_len``/``out_len`` are int64 scalars (tensors or ints), ``scale`` float64."""
    tf = _tf()
    mode = attrs["mode"]
    ctm = attrs["coordinate_transformation_mode"]
    f64 = tf.float64
    in_f = tf.cast(in_len, f64)
    out_int = tf.cast(out_len, f64)
    # ONNX's reference uses the unrounded length in_len * scale where the spec says
    # "length_resized" (the node tests follow it); with sizes the two are equal.
    out_f = in_f * tf.cast(scale, f64)
    denom = tf.where(tf.equal(out_f, 1), tf.ones_like(out_f), out_f - 1)
    # Interpolating float32 data, the source coordinates are computed in float32 from
    # the float32 scale, as onnxruntime and torch compute them: exact (float64)
    # coordinates sit up to 1e-4 away from both on a 480x640 frame, and a deep
    # network after the resize carries that into its outputs. Nearest picks an index,
    # where only exact coordinates round as the spec says.
    coord = tf.float32 if mode != "nearest" and compute == tf.float32 else f64
    in_f, out_int, out_f, denom = (tf.cast(v, coord) for v in (in_f, out_int, out_f, denom))
    xr = tf.cast(tf.range(tf.cast(out_len, tf.int64)), coord)
    scale = tf.cast(tf.cast(scale, tf.float32) if coord == tf.float32 else scale, coord)
    if ctm == "half_pixel":
        xo = (xr + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        adjustment = out_int / out_f
        center = in_f / 2
        offset = center * (1 - adjustment)
        xo = offset + (xr + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        xo = tf.where(out_f > 1, (xr + 0.5) / scale - 0.5, tf.zeros_like(xr))
    elif ctm == "align_corners":
        xo = tf.where(out_f == 1, tf.zeros_like(xr),
                      xr * (in_f - 1) / denom)
    elif ctm == "asymmetric":
        xo = xr / scale
    elif ctm == "tf_half_pixel_for_nn":
        xo = (xr + 0.5) / scale
    else:  # tf_crop_and_resize
        start, end = tf.cast(roi_start, coord), tf.cast(roi_end, coord)
        xo = tf.where(out_f > 1,
                      start * (in_f - 1) + xr * (end - start) * (in_f - 1)
                      / denom,
                      tf.fill(tf.shape(xr), 0.5 * (start + end) * (in_f - 1)))
    in_i = tf.cast(in_len, tf.int64)
    rank = len(x.shape)
    wshape = [1] * rank
    wshape[axis] = -1
    outside = None
    if ctm == "tf_crop_and_resize":
        outside = tf.logical_or(xo < 0, xo > in_f - 1)
    if mode == "nearest":
        nm = attrs["nearest_mode"]
        fl = tf.floor(xo)
        frac = xo - fl
        if nm == "round_prefer_floor":
            idx = tf.where(frac > 0.5, fl + 1, fl)
        elif nm == "round_prefer_ceil":
            idx = tf.where(frac >= 0.5, fl + 1, fl)
        elif nm == "floor":
            idx = fl
        else:
            idx = tf.math.ceil(xo)
        idx = tf.clip_by_value(tf.cast(idx, tf.int64), 0, in_i - 1)
        y = tf.gather(x, idx, axis=axis)
    else:
        fl = tf.floor(xo)
        t = xo - fl
        base = tf.cast(fl, tf.int64)
        if mode == "cubic":
            a = attrs["cubic_coeff_a"]
            t1, t2 = t + 1, 2 - t
            weights = [((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a,
                       ((a + 2) * t - (a + 3)) * t * t + 1,
                       ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                       ((a * t2 - 5 * a) * t2 + 8 * a) * t2 - 4 * a]
            offsets = [-1, 0, 1, 2]
        else:
            weights = [1 - t, t]
            offsets = [0, 1]
        taps = [base + o for o in offsets]
        if attrs["exclude_outside"]:
            weights = [tf.where(tf.logical_or(i < 0, i >= in_i), tf.zeros_like(w), w)
                       for w, i in zip(weights, taps, strict=True)]
            norm = tf.add_n(weights)
            weights = [w / norm for w in weights]
        y = None
        for w, i in zip(weights, taps, strict=True):
            part = tf.gather(x, tf.clip_by_value(i, 0, in_i - 1), axis=axis)
            part = part * tf.reshape(tf.cast(w, compute), wshape)
            y = part if y is None else y + part
    if outside is not None:
        fill = tf.cast(attrs["extrapolation_value"], y.dtype)
        y = tf.where(tf.reshape(outside, wshape), fill, y)
    return y


def _gather_transposed(x, axis: int) -> bool:
    """Whether to resample the last axis with the last two swapped: TF's CPU gather on
    the last axis copies one element per index, on the one before it a row per index,
    and the two transposes cost less than the difference (a [1, 3, 320, 640] frame to
    426 columns: 4.0 ms against 1.4, oneDNN off). Not where the row would be short."""
    rank = len(x.shape)
    if rank < 2 or axis != rank - 1:
        return False
    rows = x.shape[rank - 2]
    return rows is None or rows >= _MIN_ROW


# Shorter rows lose: [64, 64, 4, 640] to 426 columns took 97.6 ms transposed against
# 87.0; [16, 64, 8, 640] 28.5 against 34.7.
_MIN_ROW = 8


@op("Resize", attrs={"mode": "nearest", "coordinate_transformation_mode": "half_pixel",
                     "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
                     "nearest_mode": "round_prefer_floor", "antialias": 0, "axes": None,
                     "keep_aspect_ratio_policy": "stretch"}, check=_check_resize)
def resize(node):
    attrs = dict(node.attrs)
    if node.opset < 11:
        # Resize-10: (X, scales), asymmetric coordinates, nearest rounds down.
        attrs["coordinate_transformation_mode"] = "asymmetric"
        attrs["nearest_mode"] = "floor"
        return _resize(node, attrs, None, node.value(1), None)
    return _resize(node, attrs, node.value(1), node.value(2), node.value(3))


def _present(value):
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return value if value.size else None
    dims = value.shape.as_list()
    if dims and dims[0] == 0:
        return None
    return value


def _resize(node, attrs, roi, scales, sizes):
    tf = _tf()
    x = node.t(0)
    rank = node.rank(0)
    mode = attrs["mode"]
    if mode in ("bilinear", "trilinear"):
        mode = attrs["mode"] = "linear"
    dtype = node.dtype(0)
    if mode != "nearest" and dtype.name not in FLOATS:
        node.refuse(f"{mode} Resize of {dtype.name} is not supported", "resize float tensors")
    axes = attrs.get("axes")
    axes = [a + rank if a < 0 else a for a in axes] if axes else list(range(rank))
    n_axes = len(axes)
    roi, scales, sizes = _present(roi), _present(scales), _present(sizes)
    if (scales is None) == (sizes is None):
        node.refuse("Resize needs exactly one of scales and sizes")
    in_shape = node.dyn_shape(0)
    policy = attrs["keep_aspect_ratio_policy"]
    f64 = tf.float64
    # Per axis (in `axes` order): input length, output length, scale.
    in_lens = [in_shape[a] for a in axes]
    if scales is not None:
        if isinstance(scales, np.ndarray):
            scale_v = [float(s) for s in scales.astype(np.float64)]
            if any(s <= 0 for s in scale_v):
                node.refuse(f"scales {scale_v} must be positive")
        else:
            sc = tf.cast(scales, f64)
            scale_v = [sc[i] for i in range(n_axes)]
        out_lens = []
        for n, s in zip(in_lens, scale_v, strict=True):
            if isinstance(s, float) and isinstance(n, (np.integer, int)):
                out_lens.append(int(np.floor(float(n) * s)))
            else:
                out_lens.append(tf.cast(tf.floor(tf.cast(n, f64) * s), tf.int64))
    else:
        if isinstance(sizes, np.ndarray):
            size_v = [int(s) for s in sizes]
        else:
            sz = tf.cast(sizes, tf.int64)
            size_v = [sz[i] for i in range(n_axes)]
        ratios = []
        for n, s in zip(in_lens, size_v, strict=True):
            if isinstance(s, int) and isinstance(n, (np.integer, int)):
                ratios.append(s / int(n))
            else:
                ratios.append(tf.cast(s, f64) / tf.cast(n, f64))
        if policy != "stretch":
            if all(isinstance(r, float) for r in ratios):
                common = min(ratios) if policy == "not_larger" else max(ratios)
                scale_v = [common] * n_axes
                out_lens = [int(math.floor(common * int(n) + 0.5)) for n in in_lens]
            else:
                stacked = tf.stack([tf.cast(r, f64) for r in ratios])
                common = tf.reduce_min(stacked) if policy == "not_larger" else \
                    tf.reduce_max(stacked)
                scale_v = [common] * n_axes
                out_lens = [tf.cast(tf.floor(common * tf.cast(n, f64) + 0.5), tf.int64)
                            for n in in_lens]
        else:
            scale_v = ratios
            out_lens = size_v
    roi_v = None
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        if roi is None:
            node.refuse("tf_crop_and_resize needs the roi input")
        roi_v = roi.astype(np.float64) if isinstance(roi, np.ndarray) else tf.cast(roi, f64)
    compute = dtype
    y = x
    if dtype.name == "float16":
        compute = tf.float32
        y = tf.cast(x, compute)
    for j, a in enumerate(axes):
        start = end = None
        if roi_v is not None:
            start, end = roi_v[j], roi_v[j + n_axes]
        n, o, s = in_lens[j], out_lens[j], scale_v[j]
        identity = (isinstance(s, float) and s == 1.0 and isinstance(o, int)
                    and isinstance(n, (np.integer, int)) and int(n) == o
                    and (roi_v is None or (isinstance(roi_v, np.ndarray)
                                           and start == 0 and end == 1)))
        # A scale of exactly 1 maps every output position onto its own input under
        # these rules at any length, so an axis known only per request (a dynamic
        # batch) is not gathered whole either.
        identity = identity or (isinstance(s, float) and s == 1.0
                                and attrs["coordinate_transformation_mode"] in _SCALE_ONE_SAME)
        if identity:
            continue
        if _gather_transposed(y, a):
            swap = list(range(rank))
            swap[-2], swap[-1] = swap[-1], swap[-2]
            y = tf.transpose(y, swap)
            y = tf.transpose(_resize_axis(y, rank - 2, n, o, s, start, end, attrs, compute),
                             swap)
        else:
            y = _resize_axis(y, a, n, o, s, start, end, attrs, compute)
        if isinstance(o, int):
            static = y.shape.as_list()
            static[a] = o
            y.set_shape(static)
    return tf.cast(y, dtype) if y.dtype != dtype else y


@op("Upsample", attrs={"mode": "nearest", "scales": None, "height_scale": None,
                       "width_scale": None},
    check=lambda info: None if info.attrs.get("mode", "nearest") in ("nearest", "linear",
                                                                    "bilinear")
    else f"mode={info.attrs.get('mode')!r} is not supported")
def upsample(node):
    attrs = {"mode": node.attr("mode"), "coordinate_transformation_mode": "asymmetric",
             "nearest_mode": "floor", "cubic_coeff_a": -0.75, "exclude_outside": 0,
             "extrapolation_value": 0.0, "keep_aspect_ratio_policy": "stretch", "axes": None}
    if node.has(1):
        scales = node.value(1)
    elif node.attr("scales") is not None:
        scales = np.array(node.attr("scales"), np.float32)
    else:
        node.refuse("Upsample with height_scale/width_scale (opset 1) is not supported",
                    "export at opset >= 9")
    return _resize(node, attrs, None, scales, None)
