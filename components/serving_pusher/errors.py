"""Typed errors of ServingPusher."""
from tfx_bridge.errors import BridgeError, Busy, CheckFailed


class PusherError(BridgeError):
    """Base class: the push cannot proceed (lock held too long, bad base path)."""


class PusherConfigError(PusherError):
    """Bad configuration: label, target, retention, an unknown version to roll back to."""


class PushLocked(PusherError, Busy):
    """Another push holds the model's lock: nothing is wrong with the input; retry later.

    The CLI exits 4 (retryable), not 2.
    """


class PushRefused(CheckFailed):
    """The model may not be served: unblessed, contract break, wrong target, won't load.

    The component records pushed=0 with this reason; the CLI exits 1.
    """
