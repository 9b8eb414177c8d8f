"""LayerNormalization's TF forms, timed: which one the converter should emit.

The converter writes ONNX's LayerNormalization (opset 17, what torch exports for
``nn.LayerNorm``) as mean, centred square mean, rsqrt and the affine
(``onnx_tf/ops/norm.py``). TF's CPU build without oneDNN (stock TF Serving) has
no fused layer-norm kernel, so the candidates are other op sequences:
tf.nn.moments with tf.nn.batch_normalization, E[x^2] - mean^2 (one dependent
pass fewer, less accurate) and squared_difference. Each is a tf.function on a
BERT-base activation [32, 128, 768] with oneDNN off and 2 intra-op threads,
timed in interleaved rounds; printed: each form's largest difference from the
current one, and the median of the round medians with their min-max (ms).

    .venv/bin/python benchmarks/layer_norm_forms.py [--rounds 7] [--calls 15]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

EPS = 1e-5
SHAPE = (32, 128, 768)


def forms(gamma, beta):
    """name -> a tf.function computing layer norm over the last axis."""
    import tensorflow as tf

    @tf.function
    def current(x):
        mean = tf.reduce_mean(x, [-1], keepdims=True)
        d = x - mean
        inv = tf.math.rsqrt(tf.reduce_mean(d * d, [-1], keepdims=True) + EPS)
        return d * inv * gamma + beta

    @tf.function
    def moments_batch_norm(x):
        mean, var = tf.nn.moments(x, [-1], keepdims=True)
        return tf.nn.batch_normalization(x, mean, var, beta, gamma, EPS)

    @tf.function
    def mean_of_squares(x):
        mean = tf.reduce_mean(x, [-1], keepdims=True)
        var = tf.reduce_mean(tf.square(x), [-1], keepdims=True) - tf.square(mean)
        return (x - mean) * tf.math.rsqrt(var + EPS) * gamma + beta

    @tf.function
    def squared_difference(x):
        mean = tf.reduce_mean(x, [-1], keepdims=True)
        var = tf.reduce_mean(tf.math.squared_difference(x, mean), [-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + EPS) * gamma + beta

    return {"current": current, "moments_batch_norm": moments_batch_norm,
            "mean_of_squares": mean_of_squares, "squared_difference": squared_difference}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=15)
    args = parser.parse_args()
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"  # stock TF Serving's CPU kernels
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(2)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal(SHAPE).astype(np.float32))
    gamma = tf.constant(rng.standard_normal(SHAPE[-1]).astype(np.float32))
    beta = tf.constant(rng.standard_normal(SHAPE[-1]).astype(np.float32))
    candidates = forms(gamma, beta)
    reference = candidates["current"](x).numpy()
    for name, fn in candidates.items():
        print(f"{name}: max difference from current "
              f"{float(np.abs(fn(x).numpy() - reference).max()):.3g}")
        for _ in range(3):
            fn(x)
    medians = {name: [] for name in candidates}
    for _ in range(args.rounds):
        for name, fn in candidates.items():
            times = []
            for _ in range(args.calls):
                start = time.perf_counter()
                fn(x).numpy()
                times.append(time.perf_counter() - start)
            medians[name].append(statistics.median(times) * 1e3)
    for name, values in medians.items():
        print(f"{name}: {statistics.median(values):.2f} ms "
              f"({min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
