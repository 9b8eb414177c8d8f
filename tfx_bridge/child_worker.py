"""A warm worker for ``child.run_python(..., warm=True)``: run as ``python -m``.

It imports TensorFlow once (``TFX_BRIDGE_WORKER_PRELOAD``, comma-separated
modules, says what else or nothing) (with the environment it was started with, so
``TF_ENABLE_ONEDNN_OPTS`` is read as the caller set it), then reads one JSON
request per line on stdin: ``{"module", "argv", "stdout", "stderr"}``. Each
request runs the module as ``python -m module argv...`` would (``runpy``,
``__name__ == "__main__"``, ``sys.argv``), with file descriptors 1 and 2
(Python's and C++'s output alike) sent to the two files the caller named,
then restores argv, the environment and the working folder, and answers
``TFX_BRIDGE_WORKER_DONE <exit status>`` on its own copy of stdout. It leaves
on end of input (its caller is gone) or after ``child.WORKER_IDLE_S`` idle.

A request with ``"fork": true`` runs in a process forked from the worker for that
one run, so the run starts from the worker's imports but never from a previous
run's state (module globals, absl flags, TF's runtime): a fresh interpreter's
start without its import cost. The worker itself never runs TF, so nothing it
forks inherits a running TF thread pool; the forked run exits as the interpreter
would (atexit handlers, flushed streams) and dies with the worker
(``PR_SET_PDEATHSIG``), so a caller that kills a hung worker kills the run too.
No TFX imports.
"""
import os


def _run(request: dict, at_exit=None) -> int:
    import runpy
    import sys
    import traceback
    import warnings

    # runpy warns when the module was imported before (a previous run imported it):
    # harmless here, and it would be the stderr tail of a run that prints nothing else.
    warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)

    saved_argv, saved_env, saved_cwd = sys.argv, dict(os.environ), os.getcwd()
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    code = 0
    try:
        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:  # sys.exit("message"): printed, status 1, as the interpreter does
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 (the module's failure is its exit status)
        traceback.print_exc()
        code = 1
    finally:
        if at_exit is not None:  # as the interpreter's exit: argv, files and cwd still the run's
            try:
                at_exit()
            except BaseException:  # noqa: BLE001 (the run's own exit handlers: its output)
                traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    return code


def _run_forked(request: dict) -> int:
    """``_run`` in a child process; its exit status (negative: killed by that signal)."""
    import atexit

    from tfx_bridge.child import fork

    # atexit handlers run as interpreter exit runs them (tempfile, pools, Beam).
    pid = fork(lambda: _run(request, at_exit=atexit._run_exitfuncs))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main() -> None:
    import gc
    import json
    import select
    import sys

    from tfx_bridge.child import PRELOAD_ENV, WORKER_DONE, WORKER_IDLE_S

    # Requests come on stdin and answers go on a private copy of stdout: whatever
    # a module prints (fd 1 included) goes to its own files, never into the protocol.
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 (for the process's life)
    import importlib

    for name in filter(None, os.environ.get(PRELOAD_ENV, "tensorflow").split(",")):
        try:  # the cost this worker exists to pay once
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (a run that needs it reports the failure itself)
            pass
    while True:
        ready, _, _ = select.select([requests], [], [], WORKER_IDLE_S)
        if not ready:
            return  # idle too long: the caller starts a new worker next time
        line = requests.readline()
        if not line:
            return  # the caller is gone
        request = json.loads(line)
        code = _run_forked(request) if request.get("fork") else _run(request)
        gc.collect()
        answers.write(f"{WORKER_DONE}{code}\n")


if __name__ == "__main__":
    main()
