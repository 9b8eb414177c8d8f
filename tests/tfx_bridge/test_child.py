"""tfx_bridge.child: the marker line, a child's crash, its stderr tail; warm workers."""
from __future__ import annotations

import subprocess

import pytest

from tfx_bridge import child


def test_run_python_marker_line_last_wins_json_decoded():
    result = child.run_python(
        ["-c", "print('noise'); print('OUT {\"a\": 1}'); print('OUT [2]')"], "OUT ", timeout=60)
    assert result.returncode == 0 and result.payload == [2]
    assert result.stderr_tail == "no output"


def test_run_python_aborted_child_reported_with_stderr_tail():
    result = child.run_python(
        ["-c", "import os, sys; print('died here', file=sys.stderr, flush=True); os.abort()"],
        "OUT ", timeout=60)
    assert result.returncode != 0 and result.payload is None
    assert result.stderr_tail == "died here"


def _module(tmp_path, body: str) -> dict:
    """A module ``probe`` in tmp_path and the env a warm worker needs to import it."""
    (tmp_path / "probe.py").write_text(body)
    return {"PYTHONPATH": str(tmp_path), "TFX_BRIDGE_WORKER_PRELOAD": ""}


_PROBE = """import os, sys
if sys.argv[1:2] == ["abort"]:
    print("dying", file=sys.stderr, flush=True)
    os.abort()
if sys.argv[1:2] == ["hang"]:
    import time
    time.sleep(60)
if sys.argv[1:2] == ["raise"]:
    raise ValueError("bad spec " + sys.argv[2])
if sys.argv[1:2] == ["exit"]:
    os.write(1, b"fd-level noise\\n")
    sys.exit(int(sys.argv[2]))
os.environ["LEAK"] = "1"
print("OUT " + __import__("json").dumps({"pid": os.getpid(), "argv": sys.argv[1:],
      "name": __name__, "leak": os.environ.get("LEAK_SEEN"), "x": os.environ.get("X")}))
os.environ["LEAK_SEEN"] = "yes"
"""


def test_run_python_warm_reuses_one_worker_as_python_m_would(tmp_path):
    env = _module(tmp_path, _PROBE)
    first = child.run_python(["-m", "probe", "a"], "OUT ", timeout=60, env=env, warm=True)
    second = child.run_python(["-m", "probe", "b"], "OUT ", timeout=60, env=env, warm=True)
    assert first.returncode == 0 and first.payload["argv"] == ["a"]
    assert first.payload["name"] == "__main__" and first.stderr_tail == "no output"
    assert second.payload["argv"] == ["b"] and second.payload["pid"] == first.payload["pid"]
    assert second.payload["leak"] is None  # the environment is restored after each run


def test_run_python_warm_env_differs_separate_worker(tmp_path):
    env = _module(tmp_path, _PROBE)
    plain = child.run_python(["-m", "probe"], "OUT ", timeout=60, env=env, warm=True)
    other = child.run_python(["-m", "probe"], "OUT ", timeout=60, env={**env, "X": "0"},
                             warm=True)
    assert other.payload["x"] == "0" and plain.payload["x"] is None
    assert other.payload["pid"] != plain.payload["pid"]


def test_warm_env_gpu_device_node_keeps_gpu_env_else_shares_serving_cpu(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "nvidiactl").touch()  # a driver without a GPU node sees none
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "nvidia0").touch()
    assert child.warm_env(str(tmp_path / "gpu")) == child.WARM_ENV
    assert child.warm_env(str(tmp_path / "cpu")) == child.SERVING_CPU_ENV
    assert child.warm_env(str(tmp_path / "unreadable")) == child.WARM_ENV  # unknown: GPU


def test_run_python_warm_abort_reported_next_run_gets_new_worker(tmp_path):
    env = _module(tmp_path, _PROBE)
    before = child.run_python(["-m", "probe"], "OUT ", timeout=60, env=env, warm=True)
    died = child.run_python(["-m", "probe", "abort"], "OUT ", timeout=60, env=env, warm=True)
    assert died.returncode != 0 and died.payload is None and died.stderr_tail == "dying"
    after = child.run_python(["-m", "probe"], "OUT ", timeout=60, env=env, warm=True)
    assert after.returncode == 0 and after.payload["pid"] != before.payload["pid"]


def test_run_python_warm_exit_status_and_exception_as_fresh_child(tmp_path):
    env = _module(tmp_path, _PROBE)
    exited = child.run_python(["-m", "probe", "exit", "4"], "OUT ", timeout=60, env=env,
                              warm=True)
    assert exited.returncode == 4 and exited.payload is None
    raised = child.run_python(["-m", "probe", "raise", "x.json"], "OUT ", timeout=60, env=env,
                              warm=True)
    assert raised.returncode == 1 and raised.stderr_tail == "ValueError: bad spec x.json"
    fresh = child.run_python(["-m", "probe", "raise", "x.json"], "OUT ", timeout=60,
                             env=env)
    assert (fresh.returncode, fresh.stderr_tail) == (raised.returncode, raised.stderr_tail)


def test_run_python_warm_hang_times_out_and_worker_replaced(tmp_path):
    env = _module(tmp_path, _PROBE)
    with pytest.raises(subprocess.TimeoutExpired, match="probe"):
        child.run_python(["-m", "probe", "hang"], "OUT ", timeout=2, env=env, warm=True)
    after = child.run_python(["-m", "probe", "ok"], "OUT ", timeout=60, env=env, warm=True)
    assert after.returncode == 0 and after.payload["argv"] == ["ok"]


def test_run_python_warm_without_module_refused():
    with pytest.raises(ValueError, match="runs a module"):
        child.run_python(["-c", "pass"], "OUT ", timeout=5, warm=True)


def test_run_python_warm_idle_workers_capped_least_recent_stopped(tmp_path, monkeypatch):
    env = _module(tmp_path, _PROBE)
    monkeypatch.setattr(child, "WORKER_MAX_IDLE", 1)
    first = child.run_python(["-m", "probe"], "OUT ", timeout=60, env=env, warm=True)
    child.run_python(["-m", "probe"], "OUT ", timeout=60, env={**env, "X": "1"}, warm=True)
    again = child.run_python(["-m", "probe"], "OUT ", timeout=60, env=env, warm=True)
    assert again.payload["pid"] != first.payload["pid"]  # the first worker was let go


@pytest.mark.parametrize("warm", [False, True])
def test_run_python_file_in_working_folder_named_like_module_not_imported(
        tmp_path, monkeypatch, warm):
    """A user's json.py or queue.py in the folder they run from must not replace the
    module inside our children (python -m would put that folder first on sys.path);
    relative paths still resolve against it."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("json", "queue", "probe"):
        (work / f"{name}.py").write_text("raise SystemExit('shadowed: imported from cwd')\n")
    (work / "data.txt").write_text("relative ok")
    env = _module(tmp_path, "import json, queue, sys\n"
                            "print('OUT ' + json.dumps(open(sys.argv[1]).read()))\n")
    env["X_SHADOW_TEST"] = "1"  # a worker of its own, started in this folder
    monkeypatch.chdir(work)
    result = child.run_python(["-m", "probe", "data.txt"], "OUT ", timeout=120, env=env,
                              warm=warm)
    assert result.returncode == 0, result.stderr_tail
    assert result.payload == "relative ok"


_FRESH_PROBE = """import atexit, json, os, sys
STATE = globals().setdefault("STATE", [])
import preloaded
preloaded.RUNS.append(sys.argv[1])
atexit.register(lambda: open(sys.argv[2], "w").write("atexit ran"))
if sys.argv[1] == "hang":
    import time
    time.sleep(60)
print("OUT " + json.dumps({"pid": os.getpid(), "parent": os.getppid(),
                           "runs": preloaded.RUNS, "loaded": preloaded.LOADED_IN}))
sys.exit(3 if sys.argv[1] == "three" else 0)
"""


def _fresh_module(tmp_path) -> dict:
    (tmp_path / "preloaded.py").write_text("import os\nRUNS = []\nLOADED_IN = os.getpid()\n")
    return _module(tmp_path, _FRESH_PROBE)


def test_run_python_fresh_each_run_starts_from_the_workers_imports_not_a_previous_run(
        tmp_path):
    env = _fresh_module(tmp_path)
    marks = [tmp_path / f"atexit{i}" for i in range(2)]
    runs = [child.run_python(["-m", "probe", arg, str(mark)], "OUT ", timeout=60, env=env,
                             warm=True, fresh=True, preload=["preloaded"])
            for arg, mark in zip(["a", "three"], marks, strict=True)]
    first, second = (r.payload for r in runs)
    assert runs[0].returncode == 0 and runs[1].returncode == 3
    # Separate processes forked from one worker, which imported the preload once.
    assert first["pid"] != second["pid"] and first["parent"] == second["parent"]
    assert first["loaded"] == second["loaded"] == first["parent"]
    assert first["runs"] == ["a"] and second["runs"] == ["three"]  # no state carried over
    assert all(m.read_text() == "atexit ran" for m in marks)  # exits as the interpreter does
    assert runs[1].stdout.startswith("OUT ")


def test_run_python_fresh_hang_times_out_and_the_run_dies_with_its_worker(tmp_path):
    import os
    import time

    env = _fresh_module(tmp_path)
    ok = child.run_python(["-m", "probe", "a", str(tmp_path / "m")], "OUT ", timeout=60,
                          env=env, warm=True, fresh=True, preload=["preloaded"])
    worker = ok.payload["parent"]
    with pytest.raises(subprocess.TimeoutExpired, match="probe"):
        child.run_python(["-m", "probe", "hang", str(tmp_path / "h")], "OUT ", timeout=3,
                         env=env, warm=True, fresh=True, preload=["preloaded"])
    runs = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    hung = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        hung = [p for p in runs if _parent_of(p) == worker]
        if not hung and not os.path.exists(f"/proc/{worker}"):
            break
        time.sleep(0.2)
        runs = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    assert not hung, "the hung run outlived its killed worker"
    after = child.run_python(["-m", "probe", "b", str(tmp_path / "b")], "OUT ", timeout=60,
                             env=env, warm=True, fresh=True, preload=["preloaded"])
    assert after.returncode == 0 and after.payload["parent"] != worker


def test_run_python_fresh_and_in_process_runs_never_share_a_worker(tmp_path):
    env = _fresh_module(tmp_path)
    fresh = child.run_python(["-m", "probe", "a", str(tmp_path / "m")], "OUT ", timeout=60,
                             env=env, warm=True, fresh=True, preload=["preloaded"])
    plain = child.run_python(["-m", "probe", "b", str(tmp_path / "n")], "OUT ", timeout=60,
                             env=env, warm=True, preload=["preloaded"])
    assert plain.payload["pid"] != fresh.payload["parent"]


def _parent_of(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
