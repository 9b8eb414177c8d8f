"""ServingPusher: validated, atomic pushes to TF Serving with warmup, configs, rollback.

Exports resolve lazily, so the core (``serving``) imports without TFX.
"""
import importlib

_EXPORTS = {
    "ServingPusher": "component",
    "ServingPusherSpec": "component",
    "PushRefused": "errors",
    "PusherConfigError": "errors",
    "PusherError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
