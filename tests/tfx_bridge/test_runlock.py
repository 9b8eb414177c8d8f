"""One run at a time: the run lock names its holder, waits when asked, and is taken
over (and said so) from a run that died holding it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tfx_bridge.runlock import LOCK_FILE, RunLocked, RunLockError, run_lock, wait_while_held

_HOLD = ("import sys, time\n"
         "from tfx_bridge.runlock import run_lock\n"
         "with run_lock(sys.argv[1], command='tfx-bridge run --workdir w'):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(600)\n")


def _holder(folder: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, folder], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_run_lock_held_by_another_process_refused_at_once_naming_it(tmp_path):
    proc = _holder(str(tmp_path))
    try:
        start = time.monotonic()
        with pytest.raises(RunLocked, match=rf"Another run holds this workdir .*pid {proc.pid} "
                           r"on .*command: tfx-bridge run --workdir w\. Not waiting for it"):
            with run_lock(str(tmp_path)):
                pass
        assert time.monotonic() - start < 5
    finally:
        proc.kill()
        proc.wait()


def test_run_lock_waits_for_timeout_then_refused(tmp_path):
    proc = _holder(str(tmp_path))
    try:
        start = time.monotonic()
        with pytest.raises(RunLocked, match=r"Waited 1s for it"):
            with run_lock(str(tmp_path), timeout_s=1):
                pass
        assert time.monotonic() - start >= 1
    finally:
        proc.kill()
        proc.wait()


def test_run_lock_released_while_waiting_is_taken(tmp_path):
    outer = run_lock(str(tmp_path), command="first")
    outer.__enter__()
    threading.Timer(0.5, outer.__exit__, (None, None, None)).start()
    # flock is per open file: this process's second open waits like another process's.
    with run_lock(str(tmp_path), timeout_s=30) as taken_over:
        assert taken_over is None  # the first run finished and said so
        holder = json.loads((tmp_path / LOCK_FILE).read_text())
        assert holder["pid"] == os.getpid()
    assert (tmp_path / LOCK_FILE).read_text() == ""


def test_wait_while_held_held_by_another_process_refused_naming_it(tmp_path):
    proc = _holder(str(tmp_path))
    try:
        with pytest.raises(RunLocked, match=rf"Another run holds this workdir .*pid {proc.pid} "
                           r"on .*Waited 0\.5s for it"):
            wait_while_held(str(tmp_path), timeout_s=0.5)
    finally:
        proc.kill()
        proc.wait()
    # The holder is gone: free now, and still not held by the probe.
    assert wait_while_held(str(tmp_path)) >= 0
    with run_lock(str(tmp_path)):
        pass


def test_wait_while_held_released_meanwhile_returns_the_seconds_waited(tmp_path):
    outer = run_lock(str(tmp_path), command="first")
    outer.__enter__()
    threading.Timer(0.5, outer.__exit__, (None, None, None)).start()
    assert wait_while_held(str(tmp_path), timeout_s=30) > 0


@pytest.mark.parametrize("kind", ["missing folder", "no lock file", "fifo", "symlink"])
def test_wait_while_held_nothing_to_wait_for_creates_nothing_and_never_hangs(tmp_path, kind):
    folder = tmp_path / "work"
    if kind != "missing folder":
        folder.mkdir()
    if kind == "fifo":
        os.mkfifo(folder / LOCK_FILE)
    elif kind == "symlink":
        (tmp_path / "elsewhere").write_text("")
        os.symlink(tmp_path / "elsewhere", folder / LOCK_FILE)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert wait_while_held(str(folder), timeout_s=30) == 0
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_run_lock_holder_killed_is_taken_over_and_named(tmp_path):
    proc = _holder(str(tmp_path))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with run_lock(str(tmp_path)) as taken_over:
        assert taken_over is not None and taken_over.pid == proc.pid
        assert taken_over.command == "tfx-bridge run --workdir w"


def test_run_lock_block_that_raises_releases_without_a_stale_holder(tmp_path):
    with pytest.raises(KeyError):
        with run_lock(str(tmp_path)):
            raise KeyError("boom")
    with run_lock(str(tmp_path)) as taken_over:
        assert taken_over is None


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_run_lock_file_not_a_plain_file_refused_without_hanging(tmp_path, kind):
    path = tmp_path / LOCK_FILE
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(RunLockError, match=r"(is a symlink|is not a regular file); remove it"):
        with run_lock(str(tmp_path)):
            pass


@pytest.mark.parametrize("content", ['{"pid": Infinity, "host": "h", "started": "s", '
                                     '"command": "c"}', "[" * 3000, '{"pid": 1e999}',
                                     '{"pid": true, "host": "h", "started": "s", "command": "c"}',
                                     "\xff\xfe not json"])
def test_run_lock_file_with_garbage_names_no_one_and_is_taken(tmp_path, content):
    (tmp_path / LOCK_FILE).write_text(content, errors="surrogateescape")
    with run_lock(str(tmp_path)) as taken_over:
        assert taken_over is None
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()


def test_run_lock_file_that_is_a_folder_refused_naming_it(tmp_path):
    (tmp_path / LOCK_FILE).mkdir()
    with pytest.raises(RunLockError, match=r"is a folder; remove it"):
        with run_lock(str(tmp_path)):
            pass


def test_open_folder_symlink_swapped_in_refused_and_a_held_descriptor_stays_inside(tmp_path):
    from tfx_bridge.runlock import open_folder, open_lock_file

    real, elsewhere = tmp_path / "model", tmp_path / "elsewhere"
    real.mkdir()
    elsewhere.mkdir()
    folder = open_folder(str(real))
    try:
        # The path is swapped for a link after the folder was opened: the lock is
        # still made in the folder that was opened, never where the link points.
        os.rename(real, tmp_path / "moved")
        os.symlink(elsewhere, real)
        os.close(open_lock_file(LOCK_FILE, dir_fd=folder))
    finally:
        os.close(folder)
    assert (tmp_path / "moved" / LOCK_FILE).exists() and not (elsewhere / LOCK_FILE).exists()
    with pytest.raises(RunLockError, match="is a symlink; a lock's folder must be a real"):
        open_folder(str(real))
