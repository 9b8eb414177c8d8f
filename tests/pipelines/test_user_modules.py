"""The user's modules, checked before a run starts: a missing file, a module that does
not import, a missing or wrong function, each named with the flag and the user's line."""
from __future__ import annotations

import pytest

from tfx_bridge.pipelines.user_modules import UserModuleError, check_user_function


def _module(tmp_path, text: str, name: str = "trainer.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_check_user_function_module_file_returns_its_function(tmp_path):
    path = _module(tmp_path, "def run_fn(fn_args):\n    return fn_args\n")
    assert check_user_function(path, "run_fn", "--trainer-module")(3) == 3


def test_check_user_function_missing_file_refused_at_once(tmp_path):
    with pytest.raises(UserModuleError, match=r"^--trainer-module .*nope\.py: no such file"):
        check_user_function(str(tmp_path / "nope.py"), "run_fn", "--trainer-module")


@pytest.mark.parametrize("name, what", [
    ("json.py", "the standard library's module"), ("queue.py", "the standard library's"),
    ("sys.py", "the standard library's"), ("numpy.py", "the installed module .*numpy"),
    ("tfx.py", "the installed module .*tfx"), ("torch.py", "the installed module")])
def test_check_user_function_name_shadowing_stdlib_or_installed_refused_before_import(
        tmp_path, name, what):
    marker = tmp_path / "imported"
    path = _module(tmp_path, f"open({str(marker)!r}, 'w').close()\ndef run_fn(a):\n    pass\n",
                   name)
    with pytest.raises(UserModuleError, match=rf"a module named '{name[:-3]}' is {what}.*Rename"):
        check_user_function(path, "run_fn", "--trainer-module")
    assert not marker.exists()  # refused before the file ran


def test_check_user_function_file_name_not_a_module_name_refused_with_a_valid_one(tmp_path):
    path = _module(tmp_path, "def run_fn(a):\n    pass\n", "my-trainer.py")
    with pytest.raises(UserModuleError, match=r"'my-trainer' is not a Python module name.*"
                       r"my_trainer\.py"):
        check_user_function(path, "run_fn", "--trainer-module")


def test_check_user_function_imported_under_its_plain_name_then_let_go(tmp_path):
    import sys

    path = _module(tmp_path, "def run_fn(a):\n    return __name__\n", "ctr_trainer_x.py")
    assert check_user_function(path, "run_fn", "--trainer-module")(None) == "ctr_trainer_x"
    assert "ctr_trainer_x" not in sys.modules  # TFX imports its own copy from the wheel


def test_check_user_function_syntax_error_named_with_file_and_line(tmp_path):
    path = _module(tmp_path, "import os\n\ndef preprocessing_fn(inputs)\n    return inputs\n",
                   "prep.py")
    with pytest.raises(UserModuleError, match=rf"--preprocessing-module {path} does not "
                       rf"import: SyntaxError: .*\(at {path}:3\)"):
        check_user_function(path, "preprocessing_fn", "--preprocessing-module")


def test_check_user_function_module_raising_on_import_names_the_users_line(tmp_path):
    path = _module(tmp_path, "X = 1\nraise RuntimeError('no GPU quota')\n")
    with pytest.raises(UserModuleError, match=rf"RuntimeError: no GPU quota \(at {path}:2 in "
                       r"<module>\)\.$"):
        check_user_function(path, "run_fn", "--trainer-module")


def test_check_user_function_dotted_path_that_does_not_import_named():
    with pytest.raises(UserModuleError, match=r"--trainer-module nosuchpkg\.train\.run_fn: "
                       r"module 'nosuchpkg\.train' does not import: ModuleNotFoundError"):
        check_user_function("nosuchpkg.train.run_fn", "run_fn", "--trainer-module")


@pytest.mark.parametrize("text, needle", [
    ("def train(fn_args):\n    pass\n", r"defines no 'run_fn'"),
    ("run_fn = 3\n", r"run_fn is not a function \(it is int 3\)"),
    ("def run_fn(a, b):\n    pass\n", r"run_fn\(a, b\) cannot be called with one argument"),
])
def test_check_user_function_missing_or_wrong_function_named(tmp_path, text, needle):
    with pytest.raises(UserModuleError, match=needle):
        check_user_function(_module(tmp_path, text), "run_fn", "--trainer-module")


def test_check_user_function_module_with_a_dataclass_imports_as_tfx_would(tmp_path):
    path = _module(tmp_path, "from __future__ import annotations\nimport dataclasses\n\n"
                   "@dataclasses.dataclass\nclass Settings:\n    steps: int = 3\n\n"
                   "def run_fn(fn_args):\n    return Settings().steps\n")
    assert check_user_function(path, "run_fn", "--trainer-module")(None) == 3
