"""tfx_bridge.storage.names: writes and deletes stay inside their root."""
from __future__ import annotations

import os

import pytest

from tfx_bridge.storage.names import UnsafeNameError, child, is_inside


@pytest.mark.parametrize("parts", [("..", "evil"), ("a/../../evil",), ("/etc",)])
def test_child_path_leaving_root_refused(tmp_path, parts):
    with pytest.raises(UnsafeNameError, match=r"resolves outside .*refusing to write or delete"):
        child(str(tmp_path / "root"), *parts)


def test_child_symlink_planted_in_root_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(tmp_path, root / "link")
    with pytest.raises(UnsafeNameError, match="resolves outside"):
        child(str(root), "link", "x")
    assert child(str(root), "ok", "x") == str(root / "ok" / "x")


def test_is_inside_object_store_paths_normalised():
    assert is_inside("s3://b/base/m/1", "s3://b/base")
    assert not is_inside("s3://b/base/../other", "s3://b/base")
    assert not is_inside("s3://b/basement", "s3://b/base")
    assert not is_inside("gs://b/base/x", "s3://b/base")
