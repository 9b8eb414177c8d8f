"""An NCHW image batch into channel-last, and the stem convolution after it, timed.

Every convolution net the converter serves starts by moving its NCHW input to
channel-last (TF's CPU convolutions without oneDNN take NHWC only). Timed here on
an ImageNet batch [32, 3, 224, 224] with oneDNN off and 2 intra-op threads, each a
tf.function, in interleaved rounds (each about 1 s):

- ``move``: the move as one four-axis transpose, as the converter's
  ``merged_transpose`` runs it (``[N, C, H*W] -> [N, H*W, C]``), as a stack of the
  channel planes, and as a batched matmul with the identity;
- ``stem``: MobileNetV3's stem (3 -> 16 channels, 3x3, stride 2, pad 1, bias and
  ReLU) after the merged move, against the same convolution as a 2x2 stride-1
  convolution on a space-to-depth input, built by one transpose from NCHW or by TF's
  SpaceToDepth after the move;
- ``--xla SAVEDMODEL ONNX``: a served model's ``serving_default`` uncompiled and
  compiled whole by XLA (``jit_compile``), against onnxruntime (2 threads) on the
  ONNX file, at ``--batch``.

Printed: each variant's largest difference from the first of its group, and the
median of the round medians with their min-max (ms); ``--results`` writes them as
JSON.

    .venv/bin/python benchmarks/layout_moves.py [--rounds 5] [--results FILE]
        [--xla SAVEDMODEL ONNX --batch 32]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict

N, C, H, W, STEM = 32, 3, 224, 224, 16


def moves(x) -> Dict[str, Callable]:
    import tensorflow as tf

    eye = tf.eye(C)
    return {
        "four_axes": tf.function(lambda: tf.transpose(x, [0, 2, 3, 1])),
        "merged": tf.function(lambda: tf.reshape(
            tf.transpose(tf.reshape(x, [N, C, -1]), [0, 2, 1]), [N, H, W, C])),
        "stacked_planes": tf.function(lambda: tf.stack(tf.unstack(x, axis=1), axis=-1)),
        "matmul_identity": tf.function(lambda: tf.reshape(
            tf.linalg.matmul(tf.reshape(x, [N, C, -1]), eye, transpose_a=True),
            [N, H, W, C])),
    }


def stems(x, rng) -> Dict[str, Callable]:
    import numpy as np
    import tensorflow as tf

    w = rng.standard_normal((3, 3, C, STEM)).astype(np.float32)  # HWIO
    b = tf.constant(rng.standard_normal(STEM).astype(np.float32))
    # Stride 2 over 3x3 = stride 1 over 2x2 blocks of 2x2 pixels: the kernel padded to
    # 4x4 and regrouped as [block row, block col, (row in block, col in block, c), out].
    w4 = np.zeros((4, 4, C, STEM), np.float32)
    w4[:3, :3] = w
    w2 = tf.constant(w4.reshape(2, 2, 2, 2, C, STEM).transpose(0, 2, 1, 3, 4, 5)
                     .reshape(2, 2, 4 * C, STEM))
    w = tf.constant(w)

    def moved():
        return tf.reshape(tf.transpose(tf.reshape(x, [N, C, -1]), [0, 2, 1]), [N, H, W, C])

    def plain():
        y = tf.nn.conv2d(moved(), w, 2, [[0, 0], [1, 1], [1, 1], [0, 0]])
        return tf.nn.relu(tf.nn.bias_add(y, b))

    def space_to_depth_from_nchw():
        t = tf.pad(x, [[0, 0], [0, 0], [1, 1], [1, 1]])
        t = tf.reshape(t, [N, C, (H + 2) // 2, 2, (W + 2) // 2, 2])
        t = tf.reshape(tf.transpose(t, [0, 2, 4, 3, 5, 1]), [N, (H + 2) // 2, (W + 2) // 2,
                                                            4 * C])
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(t, w2, 1, "VALID"), b))

    def space_to_depth_after_move():
        t = tf.nn.space_to_depth(tf.pad(moved(), [[0, 0], [1, 1], [1, 1], [0, 0]]), 2)
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(t, w2, 1, "VALID"), b))

    return {"move_then_conv": tf.function(plain),
            "space_to_depth_from_nchw": tf.function(space_to_depth_from_nchw),
            "space_to_depth_after_move": tf.function(space_to_depth_after_move)}


def served(saved_model: str, onnx_path: str, batch: int, rng) -> Dict[str, Callable]:
    import numpy as np
    import onnxruntime as ort
    import tensorflow as tf

    model = tf.saved_model.load(saved_model)
    name, spec = next(iter(
        model.signatures["serving_default"].structured_input_signature[1].items()))
    x = rng.random([batch, *spec.shape[1:]]).astype(np.float32)
    xt = tf.constant(x)

    def call():  # through the model, which holds the variables the signature reads
        return next(iter(model.signatures["serving_default"](**{name: xt}).values()))

    plain = tf.function(call, autograph=False)
    compiled = tf.function(call, jit_compile=True, autograph=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    return {"uncompiled": plain, "xla": compiled,
            "onnxruntime": lambda: tf.constant(session.run(None, feed)[0])}


def timed(group: Dict[str, Callable], rounds: int) -> Dict[str, dict]:
    import numpy as np

    first = None
    result = {}
    for name, fn in group.items():
        out = fn().numpy()
        first = out if first is None else first
        result[name] = {"max_difference": float(np.abs(out - first).max()), "rounds_ms": []}
    for r in range(rounds):
        print(f"round {r + 1}/{rounds}", file=sys.stderr, flush=True)
        for name, fn in group.items():
            fn()
            times = []
            end = time.perf_counter() + 1.0
            while time.perf_counter() < end or len(times) < 3:
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            result[name]["rounds_ms"].append(statistics.median(times) * 1e3)
    for name, entry in result.items():
        values = entry["rounds_ms"]
        entry["median_ms"] = statistics.median(values)
        print(f"{name}: {entry['median_ms']:.2f} ms ({min(values):.2f}-{max(values):.2f}), "
              f"max difference from {next(iter(group))} {entry['max_difference']:.3g}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--results", default=None)
    parser.add_argument("--xla", nargs=2, metavar=("SAVEDMODEL", "ONNX"), default=None)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    if args.rounds < 1 or args.batch < 1:
        parser.error("--rounds and --batch must be at least 1")
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"  # stock TF Serving's CPU kernels
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")  # as the pusher serves
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(2)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    rng = np.random.default_rng(0)
    results = {}
    if args.xla:
        print(f"served model at batch {args.batch}:")
        results["served"] = timed(served(*args.xla, args.batch, rng), args.rounds)
    else:
        x = tf.constant(rng.random((N, C, H, W)).astype(np.float32))
        print(f"the move of [{N}, {C}, {H}, {W}] to channel-last:")
        results["move"] = timed(moves(x), args.rounds)
        print("the stem convolution with the move:")
        results["stem"] = timed(stems(x, rng), args.rounds)
    if args.results:
        with open(args.results, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
