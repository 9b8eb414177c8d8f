"""ONNX elementwise ops in ONNX semantics (see to_tf/core.py for the handler contract)."""
from __future__ import annotations

import numpy as np  # noqa: F401

from tfx_bridge.components.pytorch_model_importer.to_tf.core import REQUIRED, op  # noqa: F401


def _tf():
    import tensorflow as tf
    return tf


@op("Add")
def add(node):
    return _tf().add(node.t(0), node.t(1))


@op("Relu")
def relu(node):
    return _tf().nn.relu(node.t(0))
