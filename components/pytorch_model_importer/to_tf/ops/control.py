"""ONNX control ops in ONNX semantics (see to_tf/core.py for the handler contract)."""
from __future__ import annotations

import numpy as np  # noqa: F401

from tfx_bridge.components.pytorch_model_importer.to_tf.core import REQUIRED, op  # noqa: F401
