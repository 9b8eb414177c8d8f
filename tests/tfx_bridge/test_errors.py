"""tfx_bridge.errors: the one-line form of an exception for reports and tables."""
from __future__ import annotations

import pytest

from tfx_bridge.errors import short_message


@pytest.mark.parametrize("text", [
    # Graph mode: boilerplate first, the message on its own line.
    "Graph execution error:\n\nDetected at node m defined at (most recent call last):\n"
    "<stack traces unavailable>\nMatrix size-incompatible: In[0]: [1,896]\n\t [[{{node m}}]]",
    # Eager mode: the message behind a {{function_node ...}} prefix.
    "{{function_node __wrapped__MatMul_device_/job:localhost}} Matrix size-incompatible: "
    "In[0]: [1,896] [Op:MatMul]",
])
def test_short_message_tf_errors_give_the_informative_line(text):
    message = short_message(RuntimeError(text))
    assert message.startswith("RuntimeError: Matrix size-incompatible: In[0]: [1,896]")


def test_short_message_plain_error_kept_and_bounded():
    assert short_message(ValueError("bad")) == "ValueError: bad"
    assert len(short_message(ValueError("x" * 1000))) == len("ValueError: ") + 300


def _raise_from_copy(folder, monkeypatch, sources):
    """Runs a copy of the user's module (as TFX installs one from its wheel) that raises."""
    import importlib.util
    import json

    from tfx_bridge.errors import USER_SOURCES_ENV, describe_failure

    copy = folder / "installed" / "my_trainer.py"
    copy.parent.mkdir()
    copy.write_text("def run_fn():\n    raise ValueError('bad schedule')\n")
    spec = importlib.util.spec_from_file_location("my_trainer_copy", copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if sources is not None:
        monkeypatch.setenv(USER_SOURCES_ENV, json.dumps(sources))
    try:
        module.run_fn()
    except ValueError as e:
        return describe_failure(e), str(copy)


def test_describe_failure_copy_of_a_module_file_named_by_the_users_own_path(
        tmp_path, monkeypatch):
    user = str(tmp_path / "src" / "my_trainer.py")
    said, _ = _raise_from_copy(tmp_path, monkeypatch, {"my_trainer.py": user})
    assert said == f"ValueError: bad schedule (at {user}:2 in run_fn)"


@pytest.mark.parametrize("sources", [None, {"other.py": "/src/other.py"}, "not a map"])
def test_describe_failure_without_a_matching_source_names_the_file_that_ran(
        tmp_path, monkeypatch, sources):
    said, copy = _raise_from_copy(tmp_path, monkeypatch, sources)
    assert said == f"ValueError: bad schedule (at {copy}:2 in run_fn)"
