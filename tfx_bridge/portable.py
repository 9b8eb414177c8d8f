"""Beam's portable runner on this machine: a local job service and an external
SDK worker pool on 127.0.0.1, started for one run and stopped after it.

The job service (Beam's, with the job's ``direct_num_workers`` honoured: see
:func:`serve_jobs`) runs the pipeline's stages; the pool starts SDK-harness
worker processes that talk to it over the Fn API: the protocol, packaging and
pickling path of Flink, Spark and Dataflow. Each worker is a process of its
own, forked from a warm process of the pool's that imported Beam's harness,
TensorFlow and the TFX libraries once (a new interpreter per worker would pay
those imports for every worker of every Beam step); should that process be gone,
the pool starts workers as Beam does, with ``python`` from ``PATH``, so this
interpreter's folder goes first on it. Their output goes to ``job_service.log``
and ``worker_pool.log`` in ``log_dir``.
Both run in their own folder (``cwd``, by default ``log_dir``) with their own
``TMPDIR`` (a fresh folder under ``log_dir``, removed after): as on a cluster,
a DoFn that leans on the launcher's working directory or temp files fails here
too, not only there.

No TFX imports.

Example (not run here: it starts two servers)::

    with local_services("/tmp/logs") as (job_endpoint, environment_config):
        args = beam_runners.pipeline_args(settings, job_endpoint, environment_config)
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator, Tuple

from tfx_bridge import child
from tfx_bridge.errors import BridgeError

JOB_SERVICE_LOG = "job_service.log"
WORKER_POOL_LOG = "worker_pool.log"
START_TIMEOUT_S = 120.0
# Each service binds port 0 and writes the port it got to this file: no port is
# probed free and then bound by another process (which another program could take
# in between).
PORT_FILE_ENV = "TFX_BRIDGE_SERVICE_PORT_FILE"


class PortableServicesError(BridgeError):
    """The local job service or worker pool did not start (its log tail says why)."""


def _bound_port(port_file: str):
    """The port a service wrote it bound (None until it has)."""
    try:
        with open(port_file, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return None
    return int(text) if text.strip().isdigit() else None


def _report_port(port: int) -> None:
    """Writes the first port this process bound to :data:`PORT_FILE_ENV`'s file
    (whole, by a rename), once."""
    path = os.environ.pop(PORT_FILE_ENV, None)
    if path and port:
        with open(path + ".tmp", "w", encoding="ascii") as f:
            f.write(str(port))
        os.replace(path + ".tmp", path)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).strip()
    except OSError:
        return ""


def worker_env(base=None) -> dict:
    """The environment the pool's workers start in: this interpreter's folder first
    on PATH (the pool runs ``python``)."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


@contextlib.contextmanager
def local_services(log_dir: str, cwd: str = None) -> Iterator[Tuple[str, str]]:
    """Starts a job service and a worker pool; yields (job endpoint, environment
    config), both ``127.0.0.1:PORT``; stops both (and the pool's workers) after."""
    os.makedirs(log_dir, exist_ok=True)
    env = worker_env()
    env["TMPDIR"] = tempfile.mkdtemp(prefix="workers-tmp-", dir=log_dir)
    cwd = log_dir if cwd is None else cwd
    procs = []
    try:
        for args, log in ((["jobs", "--port", "0"], JOB_SERVICE_LOG),
                          (["workers", "--service_port=0"], WORKER_POOL_LOG)):
            port_file = os.path.join(env["TMPDIR"], log + ".port")
            with open(os.path.join(log_dir, log), "ab") as out:
                procs.append((subprocess.Popen(
                    [sys.executable, "-m", "tfx_bridge.portable", *args], stdout=out,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env={**env, PORT_FILE_ENV: port_file}, cwd=cwd,
                    # They serve this process only: gone with it even when it is
                    # SIGKILLed and no finally runs.
                    start_new_session=True, preexec_fn=child.die_with_parent),
                    os.path.join(log_dir, log), port_file))
        deadline = time.monotonic() + START_TIMEOUT_S
        ports = []
        for (proc, log, port_file), what in zip(procs, ("job service", "worker pool"),
                                                strict=True):
            port = _bound_port(port_file)
            while port is None or not _listening(port):
                ended = proc.poll()
                if ended is not None or time.monotonic() > deadline:
                    why = f"exit {ended}" if ended is not None else "timed out"
                    raise PortableServicesError(
                        f"the local Beam {what} did not start on 127.0.0.1 ({why}); "
                        f"its log {log}: {_tail(log) or '(empty)'}")
                time.sleep(0.2)
                port = _bound_port(port_file)
            ports.append(port)
        yield f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"
    finally:
        for proc, _, _ in procs:
            _stop(proc)
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    """The process and everything it started (its session): TERM, then KILL."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # workers the pool left behind


def _loopback_only() -> None:
    """Every gRPC server this process starts listens on 127.0.0.1 only: Beam binds
    its job, worker-pool, control, data, state and logging servers on all
    interfaces, and a worker pool runs whatever a caller asks it to start."""
    import grpc

    original = grpc.server

    def server(*args, **kwargs):
        made = original(*args, **kwargs)
        add = made.add_insecure_port

        def add_insecure_port(address: str) -> int:
            host, _, port = address.rpartition(":")
            if host in ("[::]", "0.0.0.0", "", "localhost", "[::1]"):
                address = f"127.0.0.1:{port}"
            bound = add(address)
            _report_port(bound)  # the service's own port: the first it binds
            return bound

        made.add_insecure_port = add_insecure_port
        return made

    grpc.server = server


def serve_jobs(argv) -> None:
    """Beam's local job service on 127.0.0.1, with the pipeline's
    ``direct_num_workers`` honoured: its FnApiRunner, entered through
    ``run_via_runner_api``, runs every stage on one SDK worker whatever the
    options say (Beam 2.61 reads the option only when a Python pipeline object is
    run), so a portable run asking for N workers would get one. The runner's
    worker count is set from the job's options first."""
    from apache_beam.options.pipeline_options import DirectOptions
    from apache_beam.runners.portability import local_job_service_main
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    _loopback_only()
    original = fn_runner.FnApiRunner.run_via_runner_api

    def run_via_runner_api(self, pipeline_proto, options):
        # Options arrive through the job API as strings.
        self._num_workers = max(1, int(options.view_as(DirectOptions).direct_num_workers
                                       or 1))
        return original(self, pipeline_proto, options)

    fn_runner.FnApiRunner.run_via_runner_api = run_via_runner_api
    local_job_service_main.run(list(argv))


# What the pool's warm process imports once, so that a forked SDK worker starts
# without paying it: Beam's harness and what TFX's Beam stages unpickle (about 10 s
# of CPU per worker otherwise, a few workers per Beam step).
WARM_IMPORTS = ("apache_beam.runners.worker.sdk_worker", "tensorflow", "tfx_bsl.public.tfxio",
                "tensorflow_transform.beam", "tensorflow_data_validation",
                "tensorflow_model_analysis")
FORKED = "Forked SDK worker"  # the pool log's line for each worker started


def _warm_process() -> None:
    """The pool's warm process: imports :data:`WARM_IMPORTS`, then for each request
    line on stdin (``{"control": url, "worker_id": id, "state_cache_size": n,
    "data_buffer_time_limit_ms": n}``) forks an SDK harness that connects to the
    runner's control endpoint, answering its pid. It runs nothing but those imports
    (no gRPC channel or server, no TensorFlow op), so each worker is a fresh harness
    with the imports already done. Workers die with it."""
    import importlib
    import select

    protocol_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    protocol_out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # whatever a worker prints goes to the pool's log
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for name in WARM_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (a worker that needs it fails there, by name)
            pass
    while True:
        while True:  # reap the workers that ended
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not select.select([protocol_in], [], [], 1.0)[0]:
            continue
        line = protocol_in.readline()
        if not line:
            return  # the pool is gone
        request = json.loads(line)

        def harness(request=request) -> int:
            from apache_beam.runners.worker.sdk_worker import SdkHarness

            protocol_in.close()
            protocol_out.close()
            SdkHarness(request["control"], worker_id=request["worker_id"],
                       state_cache_size=request["state_cache_size"],
                       data_buffer_time_limit_ms=request["data_buffer_time_limit_ms"]).run()
            return 0

        pid = child.fork(harness)
        protocol_out.write(f"{pid}\n")


def serve_workers(argv) -> None:
    """Beam's external worker pool, listening on 127.0.0.1 only, whose SDK workers
    are forked from a warm process (:func:`_warm_process`) instead of each starting
    a new interpreter; when that process is gone, workers start as Beam starts them."""
    import threading

    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.worker import worker_pool_main

    _loopback_only()
    # Started before the pool serves (no gRPC thread exists yet to be copied).
    warm = subprocess.Popen(child.module_command("tfx_bridge.portable", "warm"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            bufsize=1, preexec_fn=child.die_with_parent)
    lock = threading.Lock()

    class Pool(worker_pool_main.BeamFnExternalWorkerPoolServicer):
        _forked: dict = {}  # worker id -> pid of the forked harness (one pool a process)

        def StartWorker(self, request, context):
            if self._container_executable or warm.poll() is not None:
                return super().StartWorker(request, context)
            try:
                with lock:
                    warm.stdin.write(json.dumps({
                        "control": request.control_endpoint.url,
                        "worker_id": request.worker_id,
                        "state_cache_size": self._state_cache_size,
                        "data_buffer_time_limit_ms": self._data_buffer_time_limit_ms}) + "\n")
                    warm.stdin.flush()
                    pid = int(warm.stdout.readline())
            except (OSError, ValueError):  # it died meanwhile: as Beam starts workers
                return super().StartWorker(request, context)
            self._forked[request.worker_id] = pid
            print(f"{FORKED} {request.worker_id} as pid {pid}", file=sys.stderr, flush=True)
            return beam_fn_api_pb2.StartWorkerResponse()

        def StopWorker(self, request, context):
            pid = self._forked.pop(request.worker_id, None)
            if pid is None:
                return super().StopWorker(request, context)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            return beam_fn_api_pb2.StopWorkerResponse()

    worker_pool_main.BeamFnExternalWorkerPoolServicer = Pool
    worker_pool_main.main(["worker_pool_main", *argv])


if __name__ == "__main__":
    {"jobs": serve_jobs, "workers": serve_workers,
     "warm": lambda _: _warm_process()}[sys.argv[1]](sys.argv[2:])
