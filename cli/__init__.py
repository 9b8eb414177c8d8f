"""The ``tfx-bridge`` console script (``cli/``, mapped to ``tfx_bridge.cli``).

Verbs call the same cores as the components' executors. Every verb takes
``--json`` (the last stdout line is then a one-line JSON summary) and
``--debug`` (show tracebacks). Exit codes: 0 done; 1 a check failed;
2 bad usage or bad input (one message on stderr); 3 an internal error;
4 busy: another run holds a lock, retry later (docs/ARCHITECTURE.md).

Modules: ``main`` (entry, parser, exit codes, ``--json``), ``common`` (what
the verbs share), and one per verb group, each with ``add_parser(sub)``:
``pipeline`` (demo, run, compile-kfp), ``data`` (ingest, validate),
``model`` (import-model, optimize), ``serving`` (push, rollback).
"""
from tfx_bridge.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_BUSY,
    EXIT_CHECK_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    PIPELINE_LOG,
)
from tfx_bridge.cli.main import entry, main

# What scripts and tests drive the CLI with: the entry points, the exit codes
# (the whole documented set) and the pipeline log's file name.
__all__ = ["EXIT_BAD_INPUT", "EXIT_BUSY", "EXIT_CHECK_FAILED", "EXIT_INTERNAL", "EXIT_OK",
           "PIPELINE_LOG", "entry", "main"]
