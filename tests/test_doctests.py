"""Every ``>>>`` example in the installed package runs, one case per module.

Modules are found from setup.py's mapped roots (the folders the package is
installed from) and confirmed against the import system, so a module added
later is picked up without a list to maintain. A module whose import needs an
optional dependency that is not installed is skipped, naming the dependency.
"""
from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mapped_roots() -> dict:
    """setup.py's ``_TOP``: installed package name -> source folder."""
    tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_TOP" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no _TOP mapping of package names to folders")


def _modules_with_examples() -> list:
    found = []
    for package, folder in _mapped_roots().items():
        base = os.path.join(ROOT, folder)
        for dirpath, dirs, files in os.walk(base):
            dirs[:] = [d for d in dirs if os.path.isfile(os.path.join(dirpath, d, "__init__.py"))]
            rel = os.path.relpath(dirpath, base)
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    if ">>>" not in f.read():
                        continue
                stem = name[:-3]
                found.append((prefix if stem == "__init__" else f"{prefix}.{stem}", path))
    return sorted(found)


MODULES = _modules_with_examples()


def test_modules_with_examples_are_found():
    # The package's documented helpers (limits, hashing) carry examples: none found
    # means the search is broken, not that there is nothing to run.
    names = [m for m, _ in MODULES]
    assert "tfx_bridge.hashing" in names and "tfx_bridge.limits" in names, names


@pytest.mark.parametrize("module_name,path", MODULES, ids=[m for m, _ in MODULES])
def test_doctests_module_examples_pass(module_name, path):
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and os.path.samefile(spec.origin, path), (
        f"{module_name} is not installed from {path}: reinstall (pip install -e .)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top in ("tfx_bridge", ""):
            raise
        pytest.skip(f"{module_name} needs {top!r}, which is not installed")
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(module) if t.examples]
    assert tests, f"{path} has '>>>' but no docstring example doctest can find"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {path}"
