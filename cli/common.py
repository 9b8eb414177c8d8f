"""What every verb shares: exit codes, the argument parser, progress lines, and fd 2
sent to a log file while libraries run."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
import time
import warnings
from typing import Callable

from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_BUSY = 4
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it
EXIT_BROKEN_PIPE = 141  # stdout's reader left: 128 + SIGPIPE, as a shell reports it

def quiet_libraries() -> None:
    """TF/TFX/Beam log a great deal at INFO; a CLI user wants our progress lines."""
    # 3: TF prints CUDA-plugin registration errors at import on CPU hosts.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    # Beam logs a DoFn's exception (with its traceback) at ERROR before it reaches us;
    # the CLI prints the one message itself, and --debug shows everything.
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    from absl import logging as absl_logging
    absl_logging.set_verbosity(absl_logging.ERROR)


PIPELINE_LOG = "pipeline.log"
LIBRARY_LOG = "library.log"

class UsageError(BridgeError):
    """Options that do not go together; exit 2 with the one message."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error with --json still ends with a JSON line on stdout."""

    json_requested = False

    def error(self, message: str):
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        if Parser.json_requested:
            verb = self.prog.split()[1] if len(self.prog.split()) > 1 else None
            print(json.dumps({"verb": verb, "ok": False, "exit_code": EXIT_BAD_INPUT,
                              "error": message, "error_type": "UsageError"}, sort_keys=True))
        sys.exit(EXIT_BAD_INPUT)


def shown(path: str) -> str:
    """A path as the user should see it: absolute when local, a URI as given."""
    return path if "://" in path else os.path.abspath(path)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high], refused while parsing."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not between {low} and {high}")
        return value
    return parse


def number_between(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (nan and inf refused while
    parsing, not later by a comparison that nan passes)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number between "
                                             f"{low:g} and {high:g}")
        return value
    return parse


@contextlib.contextmanager
def library_side_effects():
    """What libraries do beside their work, kept off the user's stdout and temp folder:
    tools they run write to file descriptor 1 (TFX builds a module file's wheel with
    ``setup.py bdist_wheel``, whose output would precede ``--json``'s line) and leave
    folders in the temp folder (three per packaged module file). While they run, fd 1
    goes where fd 2 goes, and temp folders are made in a private folder removed
    after, however the block ends."""
    import shutil
    import tempfile

    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    private = tempfile.mkdtemp(prefix="tfx-bridge-tmp-")
    before = tempfile.tempdir
    tempfile.tempdir = private
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        tempfile.tempdir = before
        shutil.rmtree(private, ignore_errors=True)


@contextlib.contextmanager
def library_logs(workdir: str, debug: bool, name: str = PIPELINE_LOG):
    """XLA, MLIR and Beam's workers write to file descriptor 2 directly, past Python's
    logging; unless ``debug``, fd 2 goes to <workdir>/pipeline.log while the pipeline
    runs, and fd 1 goes with it (:func:`library_side_effects`). Yields the note for
    the progress line ("" with ``debug``)."""
    if debug:
        with library_side_effects():
            yield ""
        return
    import tempfile

    # A file descriptor needs a local file: for a remote workdir the log is
    # written locally and uploaded beside the outputs afterwards.
    remote = fs.is_remote(workdir)
    local_dir = tempfile.mkdtemp(prefix="tfx-bridge-log-") if remote else workdir
    path = os.path.join(local_dir, name)
    os.makedirs(local_dir, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        with library_side_effects():
            yield f"; library logs in {fs.join(workdir, name)}"
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if remote:
            fs.copy(path, fs.join(workdir, name))
            fs.remove(local_dir)


class Progress:
    """Numbered progress lines on stderr, so stdout stays for results."""

    def __init__(self, steps: int, enabled: bool = True):
        self._steps = steps
        self._step = 0
        self._enabled = enabled
        self._start = time.monotonic()

    def __call__(self, message: str) -> None:
        self._step += 1
        if self._enabled:
            elapsed = time.monotonic() - self._start
            print(f"[{self._step}/{self._steps}] {message} ({elapsed:.1f}s)", file=sys.stderr,
                  flush=True)


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print a one-line JSON summary as the last stdout line")
    p.add_argument("--debug", action="store_true", help="show tracebacks and library logs")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
