"""The ``tfx-bridge`` console script: the parser of every verb, exit codes, ``--json``."""
from __future__ import annotations

import json
import logging
import sys
from typing import List, Optional

from tfx_bridge.cli import data, model, pipeline, serving
from tfx_bridge.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_BUSY,
    EXIT_CHECK_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    Parser,
    quiet_libraries,
)
from tfx_bridge.storage import objectstore

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


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    Parser.json_requested = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not args.debug:
        quiet_libraries()
    logging.basicConfig(level=logging.INFO if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tfx_bridge.errors import BridgeError, Busy, CheckFailed

    try:
        summary = args.func(args)
        code = summary.pop("_exit", EXIT_OK) if isinstance(summary, dict) else EXIT_OK
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
    except KeyboardInterrupt:
        print(f"tfx-bridge {args.verb}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: say so in one line, keep the traceback for --debug
        if args.debug:
            raise
        print(f"tfx-bridge {args.verb}: internal error: {type(e).__name__}: {e} "
              "(rerun with --debug for the traceback, and please report it)", file=sys.stderr)
        summary, code = {"error": str(e), "error_type": type(e).__name__}, EXIT_INTERNAL
    if args.json:
        summary = {"verb": args.verb, "ok": code == EXIT_OK, "exit_code": code, **summary}
        print(json.dumps(summary, sort_keys=True, default=str))
    return code


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
