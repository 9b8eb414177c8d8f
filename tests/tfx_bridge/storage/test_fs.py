"""tfx_bridge.storage.fs on local disk (s3: test_s3.py, against a server)."""
from __future__ import annotations

import os
import threading

import pytest

from tfx_bridge.storage import fs


def test_create_if_absent_one_winner_among_concurrent_creators(tmp_path):
    path = str(tmp_path / "markers" / "7")
    wins = []

    def create(i):
        if fs.create_if_absent(path, str(i).encode()):
            wins.append(i)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert fs.read_text(path) == str(wins[0])


def test_copy_tree_copies_named_files_last(tmp_path, monkeypatch):
    src = tmp_path / "src"
    (src / "variables").mkdir(parents=True)
    for rel in ("saved_model.pb", "variables/v.data", "fingerprint.pb"):
        (src / rel).write_text(rel)
    order = []
    real_copy = fs.copy
    monkeypatch.setattr(fs, "copy", lambda a, b, overwrite=True: (order.append(
        os.path.relpath(b, str(tmp_path / "dst"))), real_copy(a, b, overwrite)))
    fs.copy_tree(str(src), str(tmp_path / "dst"), last=("saved_model.pb",))
    assert order[-1] == "saved_model.pb" and len(order) == 3
    assert fs.files_under(str(tmp_path / "dst")) == ["fingerprint.pb", "saved_model.pb",
                                                     "variables/v.data"]


def test_write_bytes_local_never_leaves_a_half_file(tmp_path):
    path = str(tmp_path / "a" / "report.json")
    fs.write_text(path, "{}")
    assert fs.read_text(path) == "{}"
    assert os.listdir(tmp_path / "a") == ["report.json"]  # no temp file left behind


def test_hash_file_in_chunks_equals_hash_of_whole_bytes(tmp_path):
    import hashlib

    data = os.urandom(10_000)
    (tmp_path / "f").write_bytes(data)
    h = hashlib.sha256()
    fs.hash_file(h, str(tmp_path / "f"), chunk=4096)  # 3 chunks, the last one short
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_fs_scheme_dispatch_local_s3_gfile_and_a_registered_backend(monkeypatch, tmp_path):
    """Each call goes to the backend of the path's scheme; a new scheme is one module
    with the same function names and one BACKENDS entry."""
    import sys
    import types

    assert fs._backend(str(tmp_path)).__name__ == "tfx_bridge.storage.local"
    assert fs._backend("s3://bucket/key").__name__ == "tfx_bridge.storage.s3"
    assert fs._backend("gs://bucket/key").__name__ == "tfx_bridge.storage.gfile"
    store = {}
    mem = types.ModuleType("mem_backend")
    mem.exists = lambda path: path in store
    mem.write_bytes = lambda path, data, sync=False: store.__setitem__(path, data)
    mem.read_bytes = lambda path: store[path]
    monkeypatch.setitem(sys.modules, "mem_backend", mem)
    monkeypatch.setitem(fs.BACKENDS, "mem", "mem_backend")
    fs.write_text("mem://x/a.txt", "hi")
    assert fs.exists("mem://x/a.txt") and fs.read_text("mem://x/a.txt") == "hi"
    with pytest.raises(NotImplementedError, match="write if on mem://x/a.txt: object stores"):
        fs.write_if("mem://x/a.txt", b"", None)


def test_staged_locally_local_paths_pass_through_and_none_stays_none(tmp_path):
    src = tmp_path / "model"
    src.mkdir()
    with fs.staged_locally(str(src), None, output=str(tmp_path / "out")) as (m, t, out):
        assert (m, t, out) == (str(src), None, str(tmp_path / "out"))
        assert os.path.isdir(out)
