"""The user's modules (``preprocessing_fn``, ``run_fn``), checked before a pipeline
starts and named when they fail.

TFX imports a module file or a dotted function path only when its component
runs, minutes in; and on an unchanged span PyTorchTrainer re-emits the served
model without importing ``run_fn`` at all, so a typo would surface on the next
new span, at night. :func:`check_user_function` imports it now, every run:
the file exists, the module imports, the name is a function taking one
argument. Failures say the flag, the module, the exception and the user's own
file and line, with no library frames.

Example:
    >>> check_user_function("tfx_bridge.pipelines.demo_trainer.run_fn", "run_fn",
    ...                     "--trainer-module").__name__
    'run_fn'
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from typing import Callable

from tfx_bridge.errors import BridgeError, describe_failure
from tfx_bridge.storage import fs


class UserModuleError(BridgeError):
    """The user's module or function cannot be used: names the flag, the module, the
    exception and the user's own file and line. The CLI exits 2."""


def _load_file(path: str, flag: str):
    if not fs.isfile(path):
        raise UserModuleError(f"{flag} {path}: no such file. Give a .py module file that "
                              "exists, or a dotted path pkg.module.function.")
    if fs.is_remote(path):  # TFX copies remote module files itself; check what it will run
        with fs.staged_locally(path) as (local,):
            return _exec_file(local, path, flag)
    return _exec_file(path, path, flag)


def _shadowed(name: str):
    """What ``name`` stands for on the task's path besides the user's file (None:
    nothing): a standard-library module, or a module or package installed in this
    environment (what the component image installs too). Folders a previous run
    added to ``sys.path`` (TFX's unpacked wheels) do not count."""
    import importlib.machinery
    import site

    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return "the standard library's module"
    installed = [*site.getsitepackages(), site.getusersitepackages()]
    spec = importlib.machinery.PathFinder.find_spec(name, installed)
    return None if spec is None else f"the installed module {spec.origin or name}"


def _exec_file(local: str, shown: str, flag: str):
    # TFX packages the file into a wheel and imports it by its plain name: check it
    # under that name, so a name the task would resolve elsewhere fails here.
    name = os.path.splitext(fs.basename(shown))[0]
    if not name.isidentifier():
        raise UserModuleError(f"{flag} {shown}: {name!r} is not a Python module name (TFX "
                              "imports the file by its name); rename it, e.g. "
                              f"{''.join(c if c.isalnum() else '_' for c in name)}.py.")
    shadowed = _shadowed(name)
    if shadowed:
        raise UserModuleError(
            f"{flag} {shown}: a module named {name!r} is {shadowed}, which TFX would import "
            f"in the task instead of, or on top of, this file. Rename the file (e.g. "
            f"{name}_module.py).")
    spec = importlib.util.spec_from_file_location(name, local)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(local)))  # as TFX's module_file
    # Registered while it runs, as imports are (dataclasses look the module up by
    # name), then put back: TFX imports its own copy from the wheel when it runs.
    before = sys.modules.get(name)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's code: any error is theirs to fix
        raise UserModuleError(f"{flag} {shown} does not import: "
                              f"{describe_failure(e)}.") from e
    finally:
        sys.path.pop(0)
        if before is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before
    return module


def check_user_function(spec: str, function: str, flag: str) -> Callable:
    """Imports ``spec`` (a ``.py`` file defining ``function``, or a dotted path to a
    function) and returns the function, or raises :class:`UserModuleError`."""
    if spec.endswith(".py"):
        module, name, shown = _load_file(spec, flag), function, spec
    else:
        module_name, _, name = spec.rpartition(".")
        shown = spec
        if not module_name:
            raise UserModuleError(f"{flag} {spec!r}: give pkg.module.{function} or a .py "
                                  "module file.")
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # ImportError, or the user's module raising on import
            raise UserModuleError(f"{flag} {spec}: module {module_name!r} does not import: "
                                  f"{describe_failure(e)}.") from e
    fn = getattr(module, name, None)
    if fn is None:
        raise UserModuleError(f"{flag} {shown}: defines no {name!r}.")
    if not callable(fn):
        raise UserModuleError(f"{flag} {shown}: {name} is not a function (it is "
                              f"{type(fn).__name__} {fn!r:.60}).")
    try:
        inspect.signature(fn).bind(object())
    except TypeError as e:
        raise UserModuleError(f"{flag} {shown}: {name}{inspect.signature(fn)} cannot be called "
                              f"with one argument, as TFX calls it ({e}).") from None
    except ValueError:  # a builtin without a signature: TFX will find out
        pass
    return fn
