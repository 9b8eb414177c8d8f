"""SIGTERM and SIGHUP end a verb as Ctrl-C does: the same cleanup, 128 + the signal."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tfx_bridge import portable
from tfx_bridge.runlock import LOCK_FILE

_HOLD = ("import sys, time\n"
         "from tfx_bridge.runlock import run_lock\n"
         "with run_lock(sys.argv[1], command='tfx-bridge run --workdir w'):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(600)\n")

# The local Beam services under the handlers the CLI installs, as `run --beam-runner
# portable` holds them while the pipeline runs.
_SERVICES = ("import sys, time\n"
             "from tfx_bridge import portable\n"
             "from tfx_bridge.cli.main import Terminated, _on_termination_signals\n"
             "_on_termination_signals()\n"
             "try:\n"
             "    with portable.local_services(sys.argv[1]):\n"
             "        print('up', flush=True)\n"
             "        time.sleep(600)\n"
             "except Terminated as e:\n"
             "    sys.exit(128 + e.signum)\n")


def _has_open(pid: int, path: str) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == path
                   for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def _working_in(folder: str):
    """Pids of live processes whose working folder is ``folder``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == folder and \
                    open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(pid))
        except OSError:
            continue
    return found


# SIGTERM through the whole CLI; SIGHUP takes the same handler (main's), checked below
# at the cost of the services alone.
@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_cli_run_waiting_for_its_lock_signal_ends_it_as_ctrl_c_exit_128_plus(tmp_path, sig):
    from tfx_bridge.pipelines import demo_data

    workdir = tmp_path / "work"
    workdir.mkdir()
    demo_data.write_demo_spans(str(tmp_path / "data"), spans=[1], rows_per_span=50,
                               files_per_span=1)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(workdir)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
        run = subprocess.Popen([exe, "run", "--workdir", str(workdir), "--data-root",
                                str(tmp_path / "data"), "--serving-base-path",
                                str(tmp_path / "serving"), "--lock-timeout", "300"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while not _has_open(run.pid, str(workdir / LOCK_FILE)) and run.poll() is None:
            assert time.monotonic() < deadline, "the run never reached its lock"
            time.sleep(0.2)
        run.send_signal(sig)
        out, err = run.communicate(timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 128 + sig, err
    assert f"stopped by {signal.Signals(sig).name}" in err and "Traceback" not in err


def _services(logs: str) -> subprocess.Popen:
    """A process holding the local Beam services, once they are up (both listed)."""
    proc = subprocess.Popen([sys.executable, "-c", _SERVICES, logs], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=portable.worker_env())
    assert proc.stdout.readline().strip() == "up", proc.stderr.read()[-2000:]
    assert len(_working_in(logs)) >= 2  # the job service and the worker pool
    return proc


def _all_gone(logs: str) -> bool:
    deadline = time.monotonic() + 30
    while _working_in(logs) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _working_in(logs) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_local_portable_services_stopped_and_temp_removed_on_sigterm(tmp_path, sig):
    logs = str(tmp_path / "logs")
    proc = _services(logs)
    try:
        proc.send_signal(sig)
        assert proc.wait(timeout=120) == 128 + sig
    finally:
        proc.kill()
    assert _all_gone(logs)
    assert not [d for d in os.listdir(logs) if d.startswith("workers-tmp-")]


def test_local_portable_services_die_with_a_sigkilled_parent(tmp_path):
    logs = str(tmp_path / "logs")
    proc = _services(logs)
    proc.kill()  # no finally runs in it: only the parent-death signal is left
    proc.wait()
    assert _all_gone(logs)
