"""Typed errors of TrtOptimizer."""
from tfx_bridge.errors import BridgeError, CheckFailed


class OptimizerError(BridgeError):
    """Base class: the model cannot be optimized as asked (e.g. TF-TRT crashed)."""


class OptimizerConfigError(OptimizerError):
    """Bad configuration: precision, thresholds, a model path with no SavedModel."""


class Drifted(CheckFailed):
    """The optimized model's outputs drifted from the original's beyond tolerance.

    Raised after the artifact is written with blessed=0 and its report.
    """
