"""Typed errors of PyTorchTrainer."""
from tfx_bridge.errors import BridgeError


class TrainerOutputError(BridgeError):
    """The run_fn finished without a usable PyTorch model in its output folder."""


class RunFnError(BridgeError):
    """The user's run_fn could not be loaded or raised: names it, the exception and the
    user's own file and line. Bad input (exit 2), not an internal error."""
