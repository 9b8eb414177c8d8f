"""What the channel-last tests share: their input and the check against onnxruntime
with the transposes left counted."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import tensorflow as tf

from tfx_bridge.onnx_tf import core

C_IN, H, W = 3, 5, 7


def transposes(converted) -> int:
    return sum(n.op == "Transpose" for n in converted.serve.graph.as_graph_def().node)


def check(model, rng, edges, batches=(1,), fewer=True):
    """Converted values match onnxruntime on ``x`` [batch, C_IN, H, W] drawn from
    ``rng``; only ``edges`` transposes remain, (``fewer``) fewer than with ONNX's
    layout kept throughout."""
    converted = core.convert(model, {"x": [None, C_IN, H, W]})
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for batch in batches:
        x = rng.standard_normal((batch, C_IN, H, W)).astype(np.float32)
        got = converted.serve(tf.constant(x))["y"].numpy()
        want = session.run(None, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert transposes(converted) == edges
    if fewer:
        plain = core.convert(model, {"x": [None, C_IN, H, W]}, channel_last=False)
        assert transposes(converted) < transposes(plain)
    return converted
