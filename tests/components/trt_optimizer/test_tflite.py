"""TrtOptimizer's TFLite candidate: Erf lowering accuracy, builds, and refusals."""
from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tfx_bridge.artifacts import savedmodel
from tfx_bridge.components.trt_optimizer import measure, tflite
from tfx_bridge.components.trt_optimizer.errors import OptimizerError


def _save(path: str, fn) -> str:
    module = tf.Module()
    module.w = tf.Variable(np.linspace(-2, 2, 4).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(x):
        return {"y": fn(x * module.w)}

    module.serve = serve
    tf.saved_model.save(module, path, signatures={"serving_default": serve})
    return path


def test_lower_erf_matches_tf_erf_within_bound():
    x = np.concatenate([np.linspace(-6, 6, 20001), [0.0, -0.0, 1e-8, -1e-8, 30.0, -30.0]])
    graph = tf.Graph()
    with graph.as_default():
        p = tf.compat.v1.placeholder(tf.float32, [None], name="p")
        tf.math.erf(p, name="e")
    lowered, count = tflite.lower_erf(graph.as_graph_def())
    assert count == 1 and "Erf" not in {n.op for n in lowered.node}
    with tf.Graph().as_default() as g2:
        tf.graph_util.import_graph_def(lowered, name="")
        with tf.compat.v1.Session(graph=g2) as sess:
            got = sess.run("e:0", {"p:0": x.astype(np.float32)})
    want = tf.math.erf(tf.constant(x, tf.float32)).numpy()
    # TF's own float32 Erf is within 3.1e-7 of exact erf, the lowering within 1.8e-7.
    assert np.max(np.abs(got - want)) < 5e-7
    small = (np.abs(x) < 1) & (x != 0)
    assert np.max(np.abs(got - want)[small] / np.abs(want[small])) < 1e-6  # relative, too
    with tf.compat.v1.Session(graph=g2) as sess:
        out = sess.run("e:0", {"p:0": np.array([np.nan, np.inf, -np.inf], np.float32)})
    assert np.isnan(out[0]) and out[1] == 1.0 and out[2] == -1.0


def test_build_erf_model_lowers_erf_and_matches(tmp_path):
    # Erf outside a pattern the converter fuses into TFLite's GELU (onnx2tf's GELU
    # graphs are not fused either: see the MoE test in test_optimize.py).
    source = _save(str(tmp_path / "erf"), lambda v: tf.math.erf(v) + v)
    built = tflite.build(source, str(tmp_path / "lite"))
    assert built.flags == [savedmodel.TFLITE_FLAG]
    assert built.notes and "Erf lowered" in built.notes[0]
    # The SavedModel is copied unchanged beside model.tflite.
    assert os.path.exists(os.path.join(tmp_path, "lite", "saved_model.pb"))
    servable = measure.load_servable(str(tmp_path / "lite"), built.flags)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    want = tf.saved_model.load(source).signatures["serving_default"](x=tf.constant(x))["y"]
    np.testing.assert_allclose(servable.outputs({"x": x})["y"], want.numpy(), atol=1e-6)


def test_build_op_without_tflite_kernel_refused_naming_op(tmp_path):
    source = _save(str(tmp_path / "digamma"), tf.math.digamma)
    with pytest.raises(OptimizerError, match=r"TFLite builtins lack Digamma \(TF Serving"):
        tflite.build(source, str(tmp_path / "lite"))
    assert not os.path.exists(tmp_path / "lite")
