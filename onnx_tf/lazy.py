"""TensorFlow, imported on first use: importing the converter stays cheap, and a
caller without TF fails only when it converts."""
from __future__ import annotations


def tf():
    """The ``tensorflow`` module."""
    import tensorflow
    return tensorflow
