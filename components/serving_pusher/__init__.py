"""ServingPusher: validated, atomic pushes to TF Serving with warmup, configs, rollback.

Exports resolve lazily, so the core (``serving``) imports without TFX.
"""
from tfx_bridge.lazy import lazy_exports

_EXPORTS = {
    "ServingPusher": "component",
    "ServingPusherSpec": "component",
    "PushRefused": "errors",
    "PusherConfigError": "errors",
    "PusherError": "errors",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
