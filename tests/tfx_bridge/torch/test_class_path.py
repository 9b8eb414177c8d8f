"""tfx_bridge.torch.class_path: a model class path refused before anything is imported."""
from __future__ import annotations

import sys

import pytest

from tfx_bridge.torch.class_path import ALLOWED_MODULES_ENV, ClassPathError, check_class_path


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A package on sys.path whose __init__ and module would fail if imported."""
    root = tmp_path / "cp_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("raise RuntimeError('the package was imported')\n")
    (root / "models.py").write_text(
        "raise RuntimeError('the module was imported')\n"
        "class Net:\n    pass\n"
        "def make():\n    pass\n"
        "SIZE = 3\n"
        "Alias = make()\n"
        "try:\n    Maybe = 1\nexcept Exception:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "cp_pkg"
    for name in [n for n in sys.modules if n.startswith("cp_pkg")]:
        del sys.modules[name]


def test_check_class_path_class_in_source_accepted_without_import(pkg):
    assert check_class_path(f"{pkg}.models:Net") == (f"{pkg}.models", "Net")
    assert f"{pkg}.models" not in sys.modules and pkg not in sys.modules


@pytest.mark.parametrize("name", ["Alias", "Maybe"])
def test_check_class_path_binding_only_import_can_tell_accepted(pkg, name):
    assert check_class_path(f"{pkg}.models:{name}")[1] == name


@pytest.mark.parametrize("name,match", [
    ("make", r"defines 'make' as a function"),
    ("SIZE", r"binds 'SIZE' to a constant value"),
    ("Missing", r"has no top-level 'Missing'"),
])
def test_check_class_path_not_a_class_refused_from_source(pkg, name, match):
    with pytest.raises(ClassPathError, match=match + r" \(read from .*models\.py, not imported\)"):
        check_class_path(f"{pkg}.models:{name}")
    assert f"{pkg}.models" not in sys.modules


@pytest.mark.parametrize("path", ["nocolon", "pkg.mod:", "1pkg:Net", "pkg..mod:Net",
                                  "pkg.mod:Net.sub"])
def test_check_class_path_malformed_refused(path):
    with pytest.raises(ClassPathError, match=r"expected pkg\.module:ClassName"):
        check_class_path(path)


def test_check_class_path_missing_module_refused_naming_it():
    with pytest.raises(ClassPathError, match=r"cannot import it \(no module named "
                                             r"'no_such_pkg_xyz\.models'\)"):
        check_class_path("no_such_pkg_xyz.models:Net")


def test_check_class_path_outside_allowed_modules_refused(pkg, monkeypatch):
    monkeypatch.setenv(ALLOWED_MODULES_ENV, "mypkg, other")
    with pytest.raises(ClassPathError, match=rf"{pkg}\.models is not in {ALLOWED_MODULES_ENV} "
                                             r"\(mypkg, other\)"):
        check_class_path(f"{pkg}.models:Net")
    monkeypatch.setenv(ALLOWED_MODULES_ENV, pkg)
    assert check_class_path(f"{pkg}.models:Net") == (f"{pkg}.models", "Net")


def test_check_class_path_imported_module_not_read_again():
    # Already imported: importing again runs nothing, so it is accepted as is.
    assert check_class_path("json:NoSuchName") == ("json", "NoSuchName")
