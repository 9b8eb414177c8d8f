"""Typed errors of PyTorchTrainer."""
from tfx_bridge.errors import BridgeError


class TrainerOutputError(BridgeError):
    """The run_fn finished without a usable PyTorch model in its output folder."""
