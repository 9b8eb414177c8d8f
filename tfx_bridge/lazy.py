"""Lazy package exports, so a component package imports without TFX until asked.

    __getattr__, __all__ = lazy_exports(__name__, {"SchemaGuard": "component"})
"""
from __future__ import annotations

import importlib
from typing import Callable, Dict, List, Tuple


def lazy_exports(package: str, exports: Dict[str, str]) -> Tuple[Callable, List[str]]:
    """A module ``__getattr__`` resolving ``name`` from ``package.<exports[name]>``.

    A value starting with ``tfx_bridge.`` is an absolute module path.
    """

    def __getattr__(name: str):
        if name in exports:
            target = exports[name]
            module = target if target.startswith("tfx_bridge.") else f"{package}.{target}"
            return getattr(importlib.import_module(module), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__, sorted(exports)
