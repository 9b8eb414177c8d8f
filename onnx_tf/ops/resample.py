"""ONNX Resize, Upsample and GridSample: ONNX's source coordinates computed per
axis and gathered/interpolated on the NC<spatial> tensor (no tf.image kernels,
whose coordinate conventions differ)."""
from __future__ import annotations

import itertools
import math
from typing import Optional

import numpy as np

from tfx_bridge.onnx_tf.core import NodeInfo
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.ops.spatial import (
    FLOATS,
    float_input,
    spatial,
    to_first,
    to_last,
)
from tfx_bridge.onnx_tf.registry import op

# --------------------------------------------------------------------------- Resize


_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
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
        if identity:
            continue
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


# --------------------------------------------------------------------------- GridSample


def _check_grid_sample(info: NodeInfo) -> Optional[str]:
    mode = info.attrs.get("mode") or ("linear" if info.opset >= 20 else "bilinear")
    if mode not in ("bilinear", "linear", "nearest", "bicubic", "cubic"):
        return f"mode={mode!r} is not supported"
    if info.attrs.get("padding_mode") not in ("zeros", "border", "reflection"):
        return f"padding_mode={info.attrs['padding_mode']!r} is not supported"
    return None


def _reflect(v, lo: float, hi: float):
    tf = _tf()
    rng = hi - lo
    if rng <= 0:
        return tf.zeros_like(v) + lo
    below = lo - v
    n = tf.floor(below / rng)
    r = below - n * rng
    even = tf.equal(tf.math.floormod(n, 2), 0)
    v_lo = tf.where(even, lo + r, hi - r)
    above = v - hi
    n2 = tf.floor(above / rng)
    r2 = above - n2 * rng
    even2 = tf.equal(tf.math.floormod(n2, 2), 0)
    v_hi = tf.where(even2, hi - r2, lo + r2)
    return tf.where(v < lo, v_lo, tf.where(v > hi, v_hi, v))


@op("GridSample", attrs={"align_corners": 0, "mode": None, "padding_mode": "zeros"},
    check=_check_grid_sample, since=16)
def grid_sample(node):
    tf = _tf()
    dtype = float_input(node)
    mode = node.attr("mode") or ("linear" if node.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = node.attr("padding_mode")
    align = bool(node.attr("align_corners"))
    rank = node.rank(0)
    nd = rank - 2
    if node.opset < 20 and nd != 2:
        node.refuse(f"GridSample-16 takes 4-D inputs, got rank {rank}")
    dims = spatial(node, 0, "GridSample input spatial dimensions")
    x = node.t(0)
    compute = tf.float64 if dtype == tf.float64 else tf.float32
    grid = tf.cast(node.t(1), compute)
    # Values as [N, D1..Dr, C] so gather_nd over the spatial index picks channel vectors.
    xl = tf.cast(to_last(x, rank), compute)
    coords = []
    for a in range(nd):
        n = grid[..., nd - 1 - a]  # the grid's last axis lists x (width) first
        size = dims[a]
        c = (n + 1) / 2 * (size - 1) if align else ((n + 1) * size - 1) / 2
        coords.append(c)
    lo = [0.0 if align else -0.5 for _ in dims]
    hi = [d - 1.0 if align else d - 0.5 for d in dims]
    if mode == "nearest":
        coords = [tf.round(c) for c in coords]  # half to even, as PyTorch
    for a in range(nd):
        c = coords[a]
        outside = tf.logical_or(c < lo[a], c > hi[a])
        if padding == "border" and mode != "cubic":
            # Cubic + border clamps each tap, not the coordinate (PyTorch and onnxruntime;
            # ONNX's reference clamps both, which no node test covers).
            coords[a] = tf.where(outside, tf.clip_by_value(c, 0.0, dims[a] - 1.0), c)
        elif padding == "reflection":
            coords[a] = tf.where(outside, _reflect(c, lo[a], hi[a]), c)
    if mode == "nearest":
        taps = [[(tf.cast(c, tf.int64), tf.ones_like(c))] for c in coords]
    else:
        taps = []
        for c in coords:
            base = tf.floor(c)
            t = c - base
            b = tf.cast(base, tf.int64)
            if mode == "linear":
                taps.append([(b, 1 - t), (b + 1, t)])
            else:
                a_ = -0.75
                t1, t2 = t + 1, 2 - t
                w = [((a_ * t1 - 5 * a_) * t1 + 8 * a_) * t1 - 4 * a_,
                     ((a_ + 2) * t - (a_ + 3)) * t * t + 1,
                     ((a_ + 2) * (1 - t) - (a_ + 3)) * (1 - t) * (1 - t) + 1,
                     ((a_ * t2 - 5 * a_) * t2 + 8 * a_) * t2 - 4 * a_]
                taps.append([(b + o, wi) for o, wi in zip((-1, 0, 1, 2), w, strict=True)])
    y = None
    for combo in itertools.product(*taps):
        weight = None
        valid = None
        idxs = []
        for a, (i, w) in enumerate(combo):
            weight = w if weight is None else weight * w
            if padding == "zeros":
                ok = tf.logical_and(i >= 0, i < dims[a])
                valid = ok if valid is None else tf.logical_and(valid, ok)
            elif padding == "reflection":
                i = tf.cast(_reflect(tf.cast(i, compute), lo[a], hi[a]), tf.int64)
            idxs.append(tf.clip_by_value(i, 0, dims[a] - 1))
        if valid is not None:
            weight = tf.where(valid, weight, tf.zeros_like(weight))
        vals = tf.gather_nd(xl, tf.stack(idxs, -1), batch_dims=1)
        part = vals * weight[..., None]
        y = part if y is None else y + part
    return tf.cast(to_first(y, rank), dtype)


# --------------------------------------------------------------------------- refused


@op("Col2Im", attrs={"dilations": None, "pads": None, "strides": None},
    check=lambda info: "Col2Im is not implemented")
def col2im(node):
    node.refuse("Col2Im is not implemented", "replace nn.Fold with standard tensor ops")
