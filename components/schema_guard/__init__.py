"""SchemaGuard: dtype and shape contract breaks, named by feature, file and record.

Exports resolve lazily, so the core (``guard``, ``contract``, ``report``)
imports without TFX.
"""
import importlib

_EXPORTS = {
    "SchemaGuard": "component",
    "SchemaGuardSpec": "component",
    "AnomaliesFound": "errors",
    "SchemaGuardConfigError": "errors",
    "SchemaGuardError": "errors",
    "SchemaGuardInputError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
