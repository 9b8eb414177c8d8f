"""Runs one CLI command in this (child) process and prints its peak RSS growth.

Heavy libraries are imported first and the kernel's peak-RSS mark is reset
(``/proc/self/clear_refs`` 5), so the figure is what the command itself added
over the process's resident set at its start, not import cost.

Usage: python tests/security/rss_probe.py tfx-bridge-args...
Prints ``RSS_GROWTH <bytes> EXIT <code>`` as its last line.
"""
from __future__ import annotations

import sys


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def main(argv) -> None:
    import apache_beam  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import tensorflow  # noqa: F401
    import tfx_bsl.coders.example_coder  # noqa: F401
    try:  # the [onnx] extra, for import-model cases
        import onnx  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        pass

    from tfx_bridge import cli

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    start = _status("VmRSS")
    code = cli.main(argv)
    sys.stdout.flush()
    print(f"RSS_GROWTH {_status('VmHWM') - start} EXIT {code}")


if __name__ == "__main__":
    main(sys.argv[1:])
