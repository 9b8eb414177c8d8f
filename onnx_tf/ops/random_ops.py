"""ONNX random ops, registered with ``fold=False``: they draw at serving time (see
onnx_tf/core.py for the handler contract).
"""
from __future__ import annotations

from typing import Optional

from tfx_bridge.onnx_tf import dtypes
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import REQUIRED, op

# --------------------------------------------------------------------------- random

_FLOAT_TYPES = {1: "float32", 10: "float16", 11: "float64"}


def _random_check(info) -> Optional[str]:
    dtype = info.attrs.get("dtype")
    first = info.input_types[0] if info.input_types else None
    if info.op_type in ("Bernoulli", "Multinomial") and first not in (None, *_FLOAT_TYPES):
        return f"input of type {dtypes.type_name(first)} (ONNX needs float16/float32/float64)"
    if info.op_type == "Multinomial":
        return None if dtype in (6, 7) else f"dtype {dtype} (ONNX allows INT32/INT64)"
    if info.op_type == "Bernoulli":
        return None
    if dtype is None and info.op_type.endswith("Like"):
        dtype = first  # the output takes the input's type
    if dtype is not None and dtype not in _FLOAT_TYPES:
        return f"dtype {dtypes.type_name(dtype)} (a random draw needs float16/float32/float64)"
    return None


def _seed(node) -> Optional[int]:
    seed = node.attr("seed")
    return None if seed is None else int(seed)


def _like_dtype(node):
    tf = _tf()
    dtype = node.attr("dtype")
    out = dtypes.tf_dtype(dtype) if dtype is not None else node.dtype(0)
    if out not in (tf.float16, tf.float32, tf.float64):
        node.refuse(f"output dtype {out.name} (a random draw needs float16/float32/float64)")
    return out


def _draw(node, shape, dtype):
    """A normal draw (``mean``, ``scale``) or a uniform one (``low``, ``high``), as the
    op type says."""
    tf = _tf()
    if "Normal" in node.op_type:
        return tf.random.normal(shape, node.attr("mean"), node.attr("scale"), dtype=dtype,
                                seed=_seed(node))
    return tf.random.uniform(shape, node.attr("low"), node.attr("high"), dtype=dtype,
                             seed=_seed(node))


@op("RandomNormal", attrs={"dtype": 1, "mean": 0.0, "scale": 1.0, "seed": None,
                           "shape": REQUIRED}, check=_random_check, fold=False)
def random_normal(node):
    return _draw(node, list(node.attr("shape")), dtypes.tf_dtype(node.attr("dtype")))


@op("RandomUniform", attrs={"dtype": 1, "low": 0.0, "high": 1.0, "seed": None,
                            "shape": REQUIRED}, check=_random_check, fold=False)
def random_uniform(node):
    return _draw(node, list(node.attr("shape")), dtypes.tf_dtype(node.attr("dtype")))


@op("RandomNormalLike", attrs={"dtype": None, "mean": 0.0, "scale": 1.0, "seed": None},
    check=_random_check, fold=False)
def random_normal_like(node):
    return _draw(node, node.dyn_shape(0), _like_dtype(node))


@op("RandomUniformLike", attrs={"dtype": None, "low": 0.0, "high": 1.0, "seed": None},
    check=_random_check, fold=False)
def random_uniform_like(node):
    return _draw(node, node.dyn_shape(0), _like_dtype(node))


@op("Bernoulli", attrs={"dtype": None, "seed": None}, check=_random_check, fold=False,
    since=15)
def bernoulli(node):
    tf = _tf()
    p = node.t(0)
    if p.dtype not in (tf.float16, tf.float32, tf.float64):
        node.refuse(f"input of dtype {p.dtype.name}")
    dtype = dtypes.tf_dtype(node.attr("dtype")) if node.attr("dtype") is not None else p.dtype
    draw = tf.random.uniform(node.dyn_shape(0), dtype=p.dtype, seed=_seed(node))
    return tf.cast(draw < p, dtype)


@op("Multinomial", attrs={"dtype": 6, "sample_size": 1, "seed": None}, check=_random_check,
    fold=False, since=7)
def multinomial(node):
    tf = _tf()
    if node.rank(0) != 2:
        node.refuse(f"input of rank {node.rank(0)} (ONNX needs [batch, classes])")
    return tf.random.categorical(node.t(0), int(node.attr("sample_size")),
                                 dtype=dtypes.tf_dtype(node.attr("dtype")), seed=_seed(node))
