"""SchemaGuard: dtype and shape contract breaks, named by feature, file and record.

Exports resolve lazily, so the core (``guard``, ``contract``, ``report``)
imports without TFX.
"""
from tfx_bridge.lazy import lazy_exports

_EXPORTS = {
    "SchemaGuard": "component",
    "SchemaGuardSpec": "component",
    "AnomaliesFound": "errors",
    "SchemaGuardConfigError": "errors",
    "SchemaGuardError": "errors",
    "SchemaGuardInputError": "errors",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
