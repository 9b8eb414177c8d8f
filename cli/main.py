"""The ``tfx-bridge`` console script: the parser of every verb, exit codes, ``--json``."""
from __future__ import annotations

import json
import logging
import os
import sys
from typing import List, Optional

from tfx_bridge.cli import data, model, pipeline, serving
from tfx_bridge.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_BUSY,
    EXIT_CHECK_FAILED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Parser,
    quiet_libraries,
)
from tfx_bridge.storage import fs, objectstore

__all__ = ["EXIT_BAD_INPUT", "EXIT_BUSY", "EXIT_CHECK_FAILED", "EXIT_INTERNAL", "EXIT_OK",
           "build_parser", "entry", "main"]

# Verb groups, in the order ``tfx-bridge --help`` lists them.
VERB_GROUPS = (pipeline, data, model, serving)


def build_parser() -> Parser:
    parser = Parser(
        prog="tfx-bridge",
        description="TFX components that carry PyTorch models into TF Serving.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for group in VERB_GROUPS:
        group.add_parser(sub)
    return parser


def _vanished_output(error: OSError, args):
    """A ResourceError when ``error`` is a path under one of the verb's output folders
    that is gone (removed while the verb wrote there); None otherwise."""
    import errno

    from tfx_bridge.errors import ResourceError

    if error.errno != errno.ENOENT or not error.filename:
        return None
    missing = os.path.abspath(str(error.filename))
    for key in ("output", "workdir", "base_path"):
        folder = getattr(args, key, None)
        if folder and "://" not in folder:
            folder = os.path.abspath(folder)
            # Gone with a folder it was written into, not a file the verb never made.
            if (missing == folder or missing.startswith(folder + os.sep)) and (
                    not fs.isdir(folder) or not fs.isdir(os.path.dirname(missing))):
                return ResourceError(
                    f"{missing} vanished while tfx-bridge {args.verb} wrote there (was "
                    f"--{key.replace('_', '-')} {folder} removed or moved?): rerun with "
                    "the folder left in place while the verb runs.")
    return None


def _outputs_of(args) -> str:
    """Where a verb works, for an OSError that names no file."""
    given = [f"--{k.replace('_', '-')} {v}" for k in ("output", "workdir", "base_path",
                                                     "serving_base_path")
             if (v := getattr(args, k, None))]
    return "a path under " + ", ".join(given) if given else "one of its paths"


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C's KeyboardInterrupt is, so every
    ``finally`` that Ctrl-C runs (Beam services stopped, temp folders removed,
    locks released, executions marked) runs for them too."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _end_like_ctrl_c(signum, frame) -> None:
    raise Terminated(signum)


def _on_termination_signals():
    """SIGTERM (``timeout``, cron, systemd, Kubernetes) and SIGHUP (a closed
    terminal) end a verb as Ctrl-C does; returns the handlers to put back (main
    thread only: a caller running verbs in a thread keeps its own)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    saved = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        saved[sig] = signal.signal(sig, _end_like_ctrl_c)
    return saved


def main(argv: Optional[List[str]] = None) -> int:
    import signal

    saved = _on_termination_signals()
    try:
        return _main(argv)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    Parser.json_requested = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not args.debug:
        quiet_libraries()
    logging.basicConfig(level=logging.INFO if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tfx_bridge.errors import (
        BridgeError,
        Busy,
        CheckFailed,
        os_error_within,
        resource_error,
    )

    try:
        if getattr(args, "beam_runner", None) is not None:
            # A runner preset that cannot work is refused now, before TFX loads and
            # local Beam services start (seconds to minutes in).
            from tfx_bridge.cli import run_env

            run_env.beam_settings(args)
        summary = args.func(args)
        code = summary.pop("_exit", EXIT_OK) if isinstance(summary, dict) else EXIT_OK
        sys.stdout.flush()  # here, where a reader that left is caught, not at exit
    except Busy as e:
        if args.debug:
            raise
        print(f"tfx-bridge {args.verb}: busy, retry later: {e}", file=sys.stderr)
        summary, code = {"error": str(e), "error_type": type(e).__name__}, EXIT_BUSY
    except CheckFailed as e:
        if args.debug:
            raise
        print(f"tfx-bridge {args.verb}: {e}", file=sys.stderr)
        summary, code = {"error": str(e), "error_type": type(e).__name__}, EXIT_CHECK_FAILED
    except BridgeError as e:
        if args.debug:
            raise
        print(f"tfx-bridge {args.verb}: {e}", file=sys.stderr)
        summary, code = {"error": str(e), "error_type": type(e).__name__}, EXIT_BAD_INPUT
    except KeyboardInterrupt as e:
        if isinstance(e, Terminated):  # 128 + the signal, as a shell reports it
            import signal

            name = signal.Signals(e.signum).name
            print(f"tfx-bridge {args.verb}: stopped by {name}", file=sys.stderr)
            return 128 + e.signum
        print(f"tfx-bridge {args.verb}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug: say so in one line, keep the traceback for --debug
        if isinstance(e, BrokenPipeError) and _stdout_gone():
            return _reader_gone()  # stdout's reader left: not a bug, nothing to say
        if args.debug:
            raise
        # A full, read-only or forbidden disk is the machine's refusal, not a bug, also
        # when Beam or TF re-raised it as another error; an output folder removed
        # while the verb wrote into it is the user's doing, not a bug either.
        cause = os_error_within(e)
        named = None if cause is None else (
            resource_error(cause, cause.filename or _outputs_of(args), "accessing",
                           writing=False) or _vanished_output(cause, args))
        if named is not None:
            print(f"tfx-bridge {args.verb}: {named}", file=sys.stderr)
            summary, code = {"error": str(named), "error_type": type(named).__name__}, \
                EXIT_BAD_INPUT
        else:
            print(f"tfx-bridge {args.verb}: internal error: {type(e).__name__}: {e} "
                  "(rerun with --debug for the traceback, and please report it)",
                  file=sys.stderr)
            summary, code = {"error": str(e), "error_type": type(e).__name__}, EXIT_INTERNAL
    if args.json:
        summary = {"verb": args.verb, "ok": code == EXIT_OK, "exit_code": code, **summary}
        try:
            print(json.dumps(summary, sort_keys=True, default=str), flush=True)
        except BrokenPipeError:
            return _reader_gone()
    return code


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader left (the broken pipe was ours to print
    to, not a subprocess's or a socket's inside the verb)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _reader_gone() -> int:
    """stdout's reader left (``tfx-bridge ingest ... | head``): exit quietly, as a
    pipeline's commands do, with 141 (128 + SIGPIPE). stdout points at /dev/null so
    the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def entry(argv: Optional[List[str]] = None) -> None:
    """The ``tfx-bridge`` console script: :func:`main`, then the exit. A run that
    registered tensorflow-io's s3 filesystem ends without C++ teardown, which
    tensorflow-io 0.37.1 aborts (exit 134 for a run that succeeded)."""
    try:
        code = main(argv)
    except BaseException:  # --debug re-raises: print it as Python would, then exit 1
        if not objectstore.tfio_enabled():
            raise
        import traceback

        traceback.print_exc()
        objectstore.exit_now(1)
    if objectstore.tfio_enabled():
        objectstore.exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
