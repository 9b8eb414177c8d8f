"""tfx_bridge.storage.folders: links out of a model folder, loops and special files
are refused; links that stay inside are fine."""
from __future__ import annotations

import os

from tfx_bridge.storage.folders import unsafe_links


def _folder(tmp_path):
    folder = tmp_path / "model"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01")
    return folder


def test_unsafe_links_plain_folder_and_inside_links_give_nothing(tmp_path):
    folder = _folder(tmp_path)
    os.symlink("saved_model.pb", folder / "copy.pb")
    os.symlink("../saved_model.pb", folder / "variables" / "up.pb")
    os.symlink("variables", folder / "vars")
    assert unsafe_links(str(folder)) == []


def test_unsafe_links_link_outside_refused_with_its_target(tmp_path):
    folder = _folder(tmp_path)
    (tmp_path / "secret.txt").write_text("x")
    os.symlink(str(tmp_path / "secret.txt"), folder / "variables" / "leak")
    os.symlink("..", folder / "parent")
    assert sorted(unsafe_links(str(folder))) == [
        "parent -> .. (outside the folder)",
        f"variables/leak -> {tmp_path / 'secret.txt'} (outside the folder)"]


def test_unsafe_links_dangling_and_loop_refused(tmp_path):
    folder = _folder(tmp_path)
    os.symlink("missing.pb", folder / "gone")
    os.symlink("..", folder / "variables" / "back")
    assert sorted(unsafe_links(str(folder))) == [
        "gone -> missing.pb (dangling)",
        "variables/back -> .. (a loop: it contains itself)"]


def test_unsafe_links_fifo_refused_as_hanging(tmp_path):
    folder = _folder(tmp_path)
    os.mkfifo(folder / "pipe")
    assert unsafe_links(str(folder)) == ["pipe (a FIFO (named pipe): reading it would hang)"]


def test_unsafe_links_object_store_uri_has_no_links():
    assert unsafe_links("s3://bucket/model") == []
