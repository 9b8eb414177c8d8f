"""Runs one CLI command in this (child) process and prints its peak RSS growth.

Heavy libraries are imported first and the kernel's peak-RSS mark is reset
(``/proc/self/clear_refs`` 5), so the figure is what the command itself added
over the process's resident set at its start, not import cost.

Usage: python tests/security/rss_probe.py tfx-bridge-args...
(``RSS_PROBE_CAP_MB=N``: the command may add at most N MiB of address space;
``RSS_PROBE_IMPORTS=torch,onnx``: more libraries imported before measuring.)
Prints ``RSS_GROWTH <bytes> EXIT <code>`` after each command; ``--then``
separates commands run one after another in this process (each measured
from its own start).
"""
from __future__ import annotations

import os
import sys


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


THEN = "--then"


def main(argv) -> None:
    import importlib

    import apache_beam  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import tensorflow  # noqa: F401
    import tfx_bsl.coders.example_coder  # noqa: F401

    for name in filter(None, os.environ.get("RSS_PROBE_IMPORTS", "").split(",")):
        importlib.import_module(name)  # e.g. torch,onnx for import-model: not its growth

    from tfx_bridge import cli

    cap = os.environ.get("RSS_PROBE_CAP_MB")
    if cap:  # address space the command may add: an allocation past it fails, not the host
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (_status("VmSize") + int(cap) * (1 << 20), hard))
    commands, current = [], []
    for arg in argv:  # "--then" runs another command in the same (warm) process
        if arg == THEN:
            commands.append(current)
            current = []
        else:
            current.append(arg)
    commands.append(current)
    for command in commands:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        start = _status("VmRSS")
        code = cli.main(command)
        sys.stdout.flush()
        print(f"RSS_GROWTH {_status('VmHWM') - start} EXIT {code}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
