"""Python in a child process, for work that can abort or crash its process
(TensorRT probes, TF-TRT and TFLite converters, loading an untrusted SavedModel):
a crash there is reported, never inherited. No TFX imports.

The child prints one line ``<marker><json>`` on stdout; everything else it
prints is ignored, and the last stderr line is kept for error messages.

``warm=True`` (for ``-m module`` children: the importer's equivalence check,
the pusher's load check, the TensorRT probe, the TFLite converter) runs the
module in a warm worker (``child_worker.py``): a separate process
that has imported TensorFlow once and runs one module at a time with
``runpy``, as ``python -m`` would, with the same argv, environment, stdout
and stderr handling. Importing TensorFlow costs about 10 s of CPU per process;
a pipeline run verifies, probes, converts and inspects, each in a child,
so without it every run pays that four times over. The worker is still a different
process from the caller: a crash, an abort or a hang kills the worker, not
the caller (reported as for a fresh child: exit status, stderr tail,
``subprocess.TimeoutExpired``), and the next call starts a new one. It never
builds what it checks; like TF Serving, it loads many SavedModels over its
life. Workers are kept per environment (``env``, e.g. oneDNN off, is set
before TensorFlow is imported), recycled after :data:`WORKER_MAX_USES` runs or
:data:`WORKER_MAX_RSS` of memory, at most :data:`WORKER_MAX_IDLE` kept idle (the
least recently used go first), and leave when idle for
:data:`WORKER_IDLE_S` or when the caller's process exits.

``fresh=True`` (with ``warm``) runs the module in a process the worker forks for
that run: the worker's imports without a previous run's state, for modules
that must start as a fresh interpreter would (absl flags, module globals),
such as the Kubeflow task commands a local run executes. ``preload`` names the
modules the worker imports before its first run (default: TensorFlow).

Example:
  >>> from tfx_bridge import child
  >>> child.run_python(["-c", "print('OUT ' + '[1, 2]')"], "OUT ", timeout=60).payload
  [1, 2]
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from tfx_bridge import cpu_allocator

WORKER_MODULE = "tfx_bridge.child_worker"
PRELOAD_ENV = "TFX_BRIDGE_WORKER_PRELOAD"  # the worker's imports (comma-separated)
WORKER_DONE = "TFX_BRIDGE_WORKER_DONE "
WORKER_MAX_USES = 40
WORKER_MAX_RSS = 4 << 30  # bytes: a worker that grew past this is not reused
WORKER_IDLE_S = 300  # the worker leaves after this long without a request
WORKER_MAX_IDLE = 2  # idle workers kept per process (each holds a TensorFlow runtime)
_REUSE_IDLE_S = WORKER_IDLE_S - 60  # the caller reuses it only well before that
# The environment of warm children that may see a GPU: a worker outlives one run, so it
# takes GPU memory as it needs it instead of all of it up front.
WARM_ENV = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
# Stock TF Serving's CPU kernels: oneDNN off (TensorFlow reads the variable once, as it
# is imported), no GPU, and the CPU allocator the pusher's manifest gives the server
# (cpu_allocator.py). The importer's equivalence check and the optimizer's CPU timing
# both run there: one warm worker serves both. BFC keeps a worker's peak after a large
# model; WORKER_MAX_RSS retires such a worker instead of reusing it.
SERVING_CPU_ENV = {"TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": "",
                   **cpu_allocator.allocator_env(cpu_allocator.BFC)}


def has_gpu_devices(dev: str = "/dev") -> bool:
    """Whether this host has an NVIDIA GPU device node (``/dev/nvidia0``...): without one
    no CUDA program sees a GPU. True when ``dev`` cannot be read (unknown)."""
    try:
        names = os.listdir(dev)
    except OSError:
        return True
    return any(n.startswith("nvidia") and n[len("nvidia"):].isdigit() for n in names)


def warm_env(dev: str = "/dev") -> Dict[str, str]:
    """The environment of warm children that may need a GPU (the TensorRT probe, the
    pusher's load check, the TFLite converter): :data:`WARM_ENV` on a host with a GPU
    device node; elsewhere they share :data:`SERVING_CPU_ENV`'s worker with the
    importer's check and the optimizer's timing (one TensorFlow start fewer per
    process; the pusher then replays warmup on the kernels stock TF Serving's CPU
    build runs, as the server it pushes to will)."""
    return dict(WARM_ENV if has_gpu_devices(dev) else SERVING_CPU_ENV)


@dataclasses.dataclass
class ChildResult:
    returncode: int
    payload: Optional[Any]  # the JSON after the marker; None when the child printed none
    stderr_tail: str  # the last stderr line, or "no output"
    stdout: str = ""
    stderr: str = ""


# ``python -m`` puts the working folder first on sys.path, so a file there named
# like a module (a user's queue.py, types.py or torch.py) would be imported in
# its place inside our child, hang it or break it. This boot runs the module as
# -m does (runpy, sys.argv[0] its file) with the working folder left off the path.
_BOOT = ("import sys; del sys.path[0]; module = sys.argv.pop(1); import runpy; "
         "runpy.run_module(module, run_name='__main__', alter_sys=True)")


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies, however the parent dies (Linux's
    ``PR_SET_PDEATHSIG``; elsewhere a no-op). For a child started to serve one
    process (a forked run, the local Beam services): used as ``preexec_fn`` or
    right after ``fork``."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def fork(run: Callable[[], int]) -> int:
    """Forks a process that dies with this one (:func:`die_with_parent`), runs ``run``
    there and exits with what it returns (1 and the traceback on stderr when it
    raises), without this process's exit path; returns its pid. Python's buffered
    output is flushed first, so the fork never writes it a second time."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        die_with_parent()
        code = run()
    except BaseException:  # noqa: BLE001 (the forked run's failure is its exit status)
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def module_command(module: str, *args: str) -> List[str]:
    """The command running ``python -m module args...`` in this interpreter, immune
    to files in the working folder shadowing modules (relative paths still work)."""
    return [sys.executable, "-c", _BOOT, module, *args]


def _command(args: Sequence[str]) -> List[str]:
    args = list(args)
    if len(args) >= 2 and args[0] == "-m":
        return module_command(args[1], *args[2:])
    return [sys.executable, *args]


def _env(overrides: Optional[Mapping[str, str]]) -> Dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.update(overrides or {})
    return env


def _result(returncode: int, stdout: str, stderr: str, marker: Optional[str]
            ) -> ChildResult:
    line = None if marker is None else next(
        (ln for ln in reversed(stdout.splitlines()) if ln.startswith(marker)), None)
    return ChildResult(returncode, None if line is None else json.loads(line[len(marker):]),
                       (stderr.strip().splitlines() or ["no output"])[-1], stdout, stderr)


def run_python(args: Sequence[str], marker: Optional[str], timeout: float,
               env: Optional[Mapping[str, str]] = None, warm: bool = False,
               fresh: bool = False, preload: Sequence[str] = ()) -> ChildResult:
    """Runs ``python <args>`` with TF's C++ logging quieted (the last stderr line is
    the tail, and it should be the error), ``env`` added to the environment; the
    payload is the JSON after ``marker`` on stdout (None: no payload is read).
    ``warm`` (``args`` = ``["-m", module, ...]``): in a warm worker, ``fresh`` in a
    process forked from it, ``preload`` its imports; see the module docstring.
    Raises subprocess.TimeoutExpired."""
    if warm:
        if len(args) < 2 or args[0] != "-m":
            raise ValueError(f"a warm child runs a module (-m NAME ...), got {list(args)[:2]}")
        env = dict(env or {})
        if preload:
            env[PRELOAD_ENV] = ",".join(preload)
        return _POOL.run(args[1], list(args[2:]), marker, timeout, _env(env), fresh)
    proc = subprocess.run(_command(args), capture_output=True, text=True,
                          timeout=timeout, env=_env(env))
    return _result(proc.returncode, proc.stdout, proc.stderr, marker)


class _Worker:
    """One warm worker process and the files its current run writes to."""

    def __init__(self, env: Dict[str, str]):
        self.proc = subprocess.Popen(
            module_command(WORKER_MODULE), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)
        self.uses = 0
        self.last_used = time.monotonic()

    def reusable(self) -> bool:
        if self.proc.poll() is not None or self.uses >= WORKER_MAX_USES:
            return False
        if time.monotonic() - self.last_used > _REUSE_IDLE_S:
            return False
        rss = _rss_bytes(self.proc.pid)
        return rss is None or rss < WORKER_MAX_RSS

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def run(self, module: str, argv: List[str], marker: Optional[str], timeout: float,
            fresh: bool = False) -> Tuple[ChildResult, bool]:
        """(result, worker still usable)."""
        self.uses += 1
        with tempfile.TemporaryDirectory(prefix="tfx-bridge-child-") as tmp:
            out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
            request = {"module": module, "argv": argv, "stdout": out, "stderr": err,
                       "fork": fresh}
            code: Optional[int] = None
            try:
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
                code = self._await_done(timeout)
            except BrokenPipeError:
                pass
            except subprocess.TimeoutExpired:
                self.stop()
                raise subprocess.TimeoutExpired([sys.executable, "-m", module, *argv],
                                                timeout) from None
            alive = code is not None
            if not alive:  # it died during the run: its exit status, as a fresh child's
                self.stop()
                code = self.proc.returncode
            self.last_used = time.monotonic()
            return _result(code, _read(out), _read(err), marker), alive

    def _await_done(self, timeout: float) -> Optional[int]:
        """The run's exit status; None when the worker died first."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(WORKER_MODULE, timeout)
                if not sel.select(left):
                    continue
                line = self.proc.stdout.readline()
                if not line:
                    return None
                if line.startswith(WORKER_DONE):
                    return int(line[len(WORKER_DONE):])


class _Pool:
    """Idle warm workers per environment, for this process only (a forked child that
    inherits the pool starts its own)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: Dict[Tuple[bool, Tuple[Tuple[str, str], ...]], List[_Worker]] = {}
        self._pid = os.getpid()

    def run(self, module: str, argv: List[str], marker: Optional[str], timeout: float,
            env: Dict[str, str], fresh: bool = False) -> ChildResult:
        # A worker that forks runs nothing itself, so it never holds a TF runtime that
        # a fork would inherit mid-use: it is never shared with in-process runs.
        key = (fresh, tuple(sorted(env.items())))
        worker = self._take(key)
        result, alive = worker.run(module, argv, marker, timeout, fresh)
        surplus: List[_Worker] = []
        if alive and worker.reusable():
            with self._lock:
                self._idle.setdefault(key, []).append(worker)
                idle = sorted((w for ws in self._idle.values() for w in ws),
                              key=lambda w: w.last_used)
                surplus = idle[:max(0, len(idle) - WORKER_MAX_IDLE)]
                for ws in self._idle.values():
                    ws[:] = [w for w in ws if w not in surplus]
        else:
            surplus = [worker]
        for w in surplus:
            w.stop()
        return result

    def _take(self, key) -> _Worker:
        with self._lock:
            if self._pid != os.getpid():  # inherited through fork: not ours to talk to
                self._idle, self._pid = {}, os.getpid()
            idle = self._idle.get(key, [])
            while idle:
                worker = idle.pop()
                if worker.reusable():
                    return worker
                worker.stop()
        return _Worker(dict(key[1]))

    def close(self) -> None:
        with self._lock:
            workers = [w for ws in self._idle.values() for w in ws]
            self._idle = {}
            if self._pid != os.getpid():
                return
        for worker in workers:
            worker.stop()


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _rss_bytes(pid: int) -> Optional[int]:
    """Resident memory of a process (Linux /proc), None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


_POOL = _Pool()
atexit.register(_POOL.close)
