"""ONNX MatMul, Gemm, Einsum, Det and the quantized matmuls (see onnx_tf/core.py for
the handler contract).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import ONNX_DOMAINS, REQUIRED, op


def normalize_axis(node, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        node.refuse(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


# --------------------------------------------------------------------------- integer helpers

_NATIVE_MATMUL = ("float16", "float32", "float64", "int32", "int64")
_WIDEN = ("int8", "uint8", "int16", "uint16", "uint32")


def _in_native_dtype(node, fn: Callable, xs: Sequence, dtype):
    """fn(*xs) where TF has the kernel; integers it lacks go through int64 (exact modulo
    2**bits, like ONNX's wrapping integer arithmetic)."""
    tf = _tf()
    if dtype.name in _NATIVE_MATMUL:
        return fn(*xs)
    if dtype.name == "uint64":
        return tf.bitcast(fn(*[tf.bitcast(x, tf.int64) for x in xs]), tf.uint64)
    if dtype.name in _WIDEN:
        return tf.cast(fn(*[tf.cast(x, tf.int64) for x in xs]), dtype)
    node.refuse(f"input dtype {dtype.name} is not supported",
                "use float16/float32/float64 or an integer type")


# --------------------------------------------------------------------------- MatMul, Gemm


@op("MatMul")
def matmul(node):
    tf = _tf()
    ra, rb = node.rank(0), node.rank(1)
    if ra == 0 or rb == 0:
        node.refuse("a scalar MatMul operand", "MatMul needs operands of rank >= 1")
    a, b = node.t(0), node.t(1)
    k = node.shape(0)[-1]
    if ra >= 3 and rb == 2 and not node.folding and node.dtype(0).is_floating and k:
        return _flat_matmul(node, a, b, k, node.shape(1)[-1])
    # numpy semantics: a 1-D operand gets a unit dim that is removed afterwards
    if ra == 1:
        a = tf.expand_dims(a, 0)
    if rb == 1:
        b = tf.expand_dims(b, 1)
    y = _in_native_dtype(node, tf.linalg.matmul, (a, b), node.dtype(0))
    squeeze = ([-2] if ra == 1 else []) + ([-1] if rb == 1 else [])
    return tf.squeeze(y, squeeze) if squeeze else y


def _flat_matmul(node, a, b, k: int, n):
    """``[..., K] @ [K, N]`` as one 2-D MatMul on ``[-1, K]`` reshaped back: TF runs a
    broadcast BatchMatMulV2 as many small products (about 1.8x slower for a transformer's
    projections), and a 2-D MatMul is what the CPU remapper fuses with a BiasAdd. The
    product is remembered so that an ``Add`` of a bias after it becomes that BiasAdd."""
    tf = _tf()
    # K is static and positive (a [-1, 0] reshape is ambiguous)
    y2 = tf.linalg.matmul(tf.reshape(a, [-1, k]), b)
    lead = node.dyn_shape(0)[:-1]
    out_shape = (np.append(lead, n) if isinstance(lead, np.ndarray) and n is not None
                 else tf.concat([tf.cast(lead, tf.int64),
                                 tf.shape(b, out_type=tf.int64)[-1:]], 0))
    y = tf.reshape(y2, out_shape)
    node.graph.flat_matmuls[y.ref()] = (y2, out_shape)
    return y


def bias_after_matmul(node, x, c: Optional[np.ndarray]):
    """``x + c`` as ``reshape(BiasAdd(product, c))`` where ``x`` is a flattened MatMul's
    output (``_flat_matmul``) and ``c`` a constant bias over its last axis; else None."""
    tf = _tf()
    entry = node.graph.flat_matmuls.get(x.ref()) if hasattr(x, "ref") else None
    if entry is None or c is None or c.ndim == 0 or c.ndim > len(x.shape):
        return None
    n = x.shape[-1]
    if n is None or c.shape[-1] != n or any(d != 1 for d in c.shape[:-1]):
        return None
    if tf.as_dtype(c.dtype) != x.dtype:
        return None
    y2, out_shape = entry
    bias = node.graph.converter.tensor(np.ascontiguousarray(c.reshape(n)))
    return tf.reshape(tf.nn.bias_add(y2, bias), out_shape)


def _only_gemm_b(readers) -> bool:
    """Whether every reader is a Gemm taking the value as B with transB=1: only then
    does storing its transpose keep one copy of the weights (a table also gathered,
    as tied embeddings are, is read as it is)."""
    return bool(readers) and all(
        n is not None and n.op_type == "Gemm" and n.domain in ONNX_DOMAINS and i == 1
        and any(a.name == "transB" and a.i for a in n.attribute) for n, i in readers)


@op("Gemm", attrs={"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0, "broadcast": 0})
def gemm(node):
    tf = _tf()
    if node.rank(0) != 2 or node.rank(1) != 2:
        node.refuse(f"Gemm operands of rank {node.rank(0)} and {node.rank(1)}",
                    "Gemm takes 2-D A and B")
    dtype = node.dtype(0)
    alpha, beta = float(node.attr("alpha")), float(node.attr("beta"))
    if not dtype.is_floating and (alpha != 1.0 or beta not in (0.0, 1.0)):
        node.refuse(f"integer ({dtype.name}) Gemm with alpha={alpha}, beta={beta}",
                    "scale in float or use alpha=1, beta=1")
    ta, tb = bool(node.attr("transA")), bool(node.attr("transB"))
    weights = (node.maybe_const(1) if tb and not node.folding
               and _only_gemm_b(node.graph.converter.readers(node.proto.input[1])) else None)
    if weights is not None:
        # Constant weights (torch's Linear: transB=1) are stored as [K, N] once, here:
        # TF's CPU MatMul with transpose_b reads them across rows, 4x slower at batch
        # 32 and 18x at batch 1 for a 2048 -> 1000 classifier head. Weights another op
        # reads too stay as they are, so that a large table is not held twice. Input 1
        # is not read as a tensor then: that would make (and save) a [N, K] variable.
        b, tb = node.graph.converter.tensor(np.ascontiguousarray(weights.T)), False
    else:
        b = node.t(1)

    def mm(x, w):
        return tf.linalg.matmul(x, w, transpose_a=ta, transpose_b=tb)

    y = _in_native_dtype(node, mm, (node.t(0), b), dtype)
    if alpha != 1.0:
        y = y * tf.constant(alpha, dtype)
    if node.has(2) and beta != 0.0:
        c = node.t(2)
        if beta != 1.0:
            c = c * tf.constant(beta, dtype)
        n = y.shape[-1]
        if (dtype.is_floating and alpha == 1.0 and c.shape.rank == 1 and n is not None
                and c.shape[0] == n):
            # MatMul + BiasAdd (+ Relu...) is what TF's CPU remapper fuses (_FusedMatMul)
            return tf.nn.bias_add(y, c)
        y = y + c
    return y


# --------------------------------------------------------------------------- Einsum


def _einsum_equation(node, equation: str, n_inputs: int) -> str:
    """The explicit form ``lhs->rhs`` of an ONNX equation (implicit output: the letters
    seen once, sorted, after the ellipsis)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs:
        node.refuse(f"equation {equation!r} has {len(terms)} operands for {n_inputs} inputs")
    for term in terms + ([rhs] if arrow else []):
        body = term.replace("...", "", 1)
        if not all(ch.isalpha() for ch in body):
            node.refuse(f"equation {equation!r}: term {term!r} is not letters with at most "
                        "one ellipsis")
    if not arrow:
        letters = "".join(t.replace("...", "") for t in terms)
        once = sorted(ch for ch in set(letters) if letters.count(ch) == 1)
        rhs = ("..." if any("..." in t for t in terms) else "") + "".join(once)
    out = rhs.replace("...", "")
    if len(set(out)) != len(out):
        node.refuse(f"equation {equation!r} repeats a letter in its output")
    if not set(out) <= set(lhs):
        node.refuse(f"equation {equation!r} has output letters no input has")
    return ",".join(terms) + "->" + rhs


def _linear_einsum(equation: str) -> Optional[bool]:
    """For ``P k, k n -> P n`` (a Linear layer: P distinct letters or an ellipsis, the
    weight's term ``kn`` or ``nk``): whether the weight is transposed (``nk``); else
    None."""
    lhs, rhs = equation.split("->")
    a, b = lhs.split(",")
    if len(b) != 2 or not a or a.endswith("."):
        return None
    k, prefix = a[-1], a[:-1]
    if b[0] == k:
        n, transposed = b[1], False
    elif b[1] == k:
        n, transposed = b[0], True
    else:
        return None
    letters = prefix.replace("...", "")
    if (k == n or k in letters or n in letters or len(set(letters)) != len(letters)
            or rhs != prefix + n):
        return None
    return transposed


@op("Einsum", attrs={"equation": REQUIRED}, since=12)
def einsum(node):
    tf = _tf()
    equation = _einsum_equation(node, node.attr("equation"), node.n)
    transposed = _linear_einsum(equation) if node.n == 2 else None
    # the first term is at least "k" here, so input 0 has a last axis
    k = node.shape(0)[-1] if transposed is not None else None
    if (k and not node.folding and node.dtype(0).is_floating and node.rank(0) >= 2
            and node.rank(1) == 2):
        w = node.maybe_const(1)
        if w is not None:
            w = node.graph.converter.tensor(np.ascontiguousarray(w.T if transposed else w))
        else:
            w = tf.transpose(node.t(1)) if transposed else node.t(1)
        n = node.shape(1)[0 if transposed else 1]
        if node.rank(0) == 2:
            return tf.linalg.matmul(node.t(0), w)
        return _flat_matmul(node, node.t(0), w, k, n)
    xs = [node.t(i) for i in range(node.n)]

    def fn(*args):
        return tf.einsum(equation, *args)

    try:
        return _in_native_dtype(node, fn, xs, node.dtype(0))
    except (ValueError, tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        node.refuse(f"equation {node.attr('equation')!r} is not supported by tf.einsum "
                    f"({first})", "rewrite it as MatMul/Transpose/ReduceSum")


# --------------------------------------------------------------------------- Det


@op("Det", since=11)
def det(node):
    tf = _tf()
    shape = node.shape(0)
    if len(shape) < 2:
        node.refuse(f"Det of a rank-{len(shape)} input", "Det takes [..., M, M]")
    x = node.t(0)
    if node.dtype(0) == tf.float16:  # no half kernel: float32 rounded once to half
        return tf.cast(tf.linalg.det(tf.cast(x, tf.float32)), tf.float16)
    return tf.linalg.det(x)


# --------------------------------------------------------------------------- quantized

def _quantized(info) -> str:
    return (f"{info.op_type} is a quantized (integer) matmul, which this converter does not "
            "implement; export the float model (no quantization)")


@op("MatMulInteger", check=_quantized, since=10)
def matmul_integer(node):
    node.refuse(_quantized(node))


@op("QLinearMatMul", check=_quantized, since=10)
def qlinear_matmul(node):
    node.refuse(_quantized(node))
