"""A model class named ``pkg.module:ClassName`` (``--module-class``, a spec's
``module_class``), refused before it is imported where that can be known
without running the module's code (README, "Trust boundaries"). No TFX imports.

Example:
    >>> check_class_path("torch.nn:Linear")
    ('torch.nn', 'Linear')
    >>> check_class_path("this:s")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.torch.class_path.ClassPathError: module class 'this:s': this binds 's' to ...
"""
from __future__ import annotations

import os
import re
from typing import Optional, Tuple

from tfx_bridge.errors import BridgeError


class ClassPathError(BridgeError):
    """A module class path refused before its module was imported."""


ALLOWED_MODULES_ENV = "TFX_BRIDGE_ALLOWED_MODULES"
# Model builders: functions, not classes, allowed by their whole name because they are
# the form a model family comes in (torchvision's detectors are built by these, with
# keyword arguments such as num_classes). They are called with weights=None and
# weights_backbone=None: weights come from the state_dict, never a download.
DETECTION_BUILDERS = (
    "fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2", "fasterrcnn_mobilenet_v3_large_fpn",
    "fasterrcnn_mobilenet_v3_large_320_fpn", "retinanet_resnet50_fpn",
    "retinanet_resnet50_fpn_v2", "fcos_resnet50_fpn", "ssd300_vgg16",
    "ssdlite320_mobilenet_v3_large", "maskrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn_v2",
    "keypointrcnn_resnet50_fpn")
BUILDERS = frozenset(f"torchvision.models.detection:{n}" for n in DETECTION_BUILDERS)
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_class_path(name: str) -> Tuple[str, str]:
    """(module, class name) of ``pkg.module:ClassName``, refused before anything is
    imported where it can be: a path that is not dotted identifiers; a module
    outside ``TFX_BRIDGE_ALLOWED_MODULES`` (comma-separated packages) when that is
    set; a module that cannot be found; and, read from the module's source with
    ``ast`` (not executed), a name that the module binds to a function or a
    constant, or does not bind at all (except the builder functions named whole in
    ``BUILDERS``). Nothing is imported for this: not the module, not its parent
    packages (found through their search paths)."""
    import ast
    import sys

    module_path, sep, class_name = name.partition(":")
    if not sep or not _DOTTED.fullmatch(module_path) or not _IDENTIFIER.fullmatch(class_name):
        raise ClassPathError(f"module class {name!r}: expected pkg.module:ClassName.")
    allowed = [p.strip() for p in os.environ.get(ALLOWED_MODULES_ENV, "").split(",")
               if p.strip()]
    if allowed and not any(module_path == p or module_path.startswith(p + ".")
                           for p in allowed):
        raise ClassPathError(
            f"module class {name!r}: {module_path} is not in {ALLOWED_MODULES_ENV} "
            f"({', '.join(allowed)}); add its package there, or name a class in one of them.")
    if module_path in sys.modules:  # imported already: importing it again runs nothing
        return module_path, class_name
    try:
        spec = _find_spec(module_path)
    except (ImportError, ValueError) as e:
        spec, why = None, f"{type(e).__name__}: {e}"
    else:
        why = f"no module named {module_path!r}"
    if spec is None:
        raise ClassPathError(f"module class {name!r}: cannot import it ({why}). Install the "
                              "package that defines it, or fix the path.")
    try:
        source = spec.loader.get_source(module_path) if spec.loader else None
        tree = ast.parse(source) if source is not None else None
    except (ImportError, OSError, SyntaxError, ValueError, UnicodeDecodeError):
        tree = None  # unreadable here: the import says why, with its line
    if tree is None:  # a compiled or built-in module too: checked after the import
        return module_path, class_name
    binding = _top_level_binding(tree, class_name)
    if binding is not None:
        raise ClassPathError(
            f"module class {name!r}: {module_path} {binding} (read from {spec.origin}, "
            "not imported). Name the model's class, e.g. mypkg.models:CtrModel"
            + (", or one of the builders allowed by name: " + ", ".join(sorted(BUILDERS))
               if module_path == "torchvision.models.detection" else "") + ".")
    return module_path, class_name


def _find_spec(module_path: str):
    """The module's spec, found level by level without importing a parent package
    (``importlib.util.find_spec`` would run each parent's ``__init__``)."""
    import importlib.util
    import sys

    parts = module_path.split(".")
    spec = importlib.util.find_spec(parts[0])  # a top-level name: found, not imported
    for i in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            return None  # a parent that is not a package has no submodules
        name = ".".join(parts[:i + 1])
        known = sys.modules.get(name)
        spec = known.__spec__ if known is not None else \
            _meta_path_spec(name, list(spec.submodule_search_locations))
    return spec


def _meta_path_spec(name: str, path: list):
    """What the import system's finders (editable installs' included) find for
    ``name`` in its parent's ``path``, as importlib does once the parent is imported."""
    import sys

    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, path) if find is not None else None
        if spec is not None:
            return spec
    return None


def _top_level_binding(tree, name: str) -> Optional[str]:
    """Why ``name`` in a module's top level is surely not a class (None: a class, a
    re-export, or something only the import can tell)."""
    import ast

    found = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return None
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" or (a.asname or a.name.split(".")[0]) == name
                   for a in node.names):
                return None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == "__getattr__":
                return None
            if node.name == name:
                found = f"defines {name!r} as a function"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if isinstance(node.value, (ast.Constant, ast.JoinedStr, ast.List, ast.Dict,
                                           ast.Tuple, ast.Set)):
                    found = f"binds {name!r} to a {type(node.value).__name__.lower()} value"
                else:
                    return None  # an alias or a factory's result: the import tells
        elif _may_bind(node, name):
            return None  # bound inside an if/try/for/with: the import tells
    return found or f"has no top-level {name!r}"


def _may_bind(node, name: str) -> bool:
    import ast

    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, ast.Store):
            return True
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                sub.name == name:
            return True
        if isinstance(sub, (ast.Import, ast.ImportFrom)) and any(
                a.name == "*" or (a.asname or a.name.split(".")[0]) == name for a in sub.names):
            return True
    return False
