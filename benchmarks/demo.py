"""Times the README's main command end to end: `tfx-bridge demo` in a fresh workdir.

Target (issue 7): under 3 minutes on 2 cores. Reports total wall time and the
time of each progress step, from the CLI's own progress lines.

    .venv/bin/python benchmarks/demo.py
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time


def main() -> None:
    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        proc = subprocess.run([exe, "demo", "--workdir", tmp, "--json"], capture_output=True,
                              text=True)
        total = time.monotonic() - start
    steps = re.findall(r"^\[(\d)/\d\] (.*) \(([\d.]+)s\)$", proc.stderr, re.MULTILINE)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    print("| step | cumulative s |\n|---|---|")
    for n, text, seconds in steps:
        print(f"| {n}. {text[:70]} | {seconds} |")
    print(f"\nwall time incl. interpreter start: {total:.1f}s (target < 180s); exit "
          f"{proc.returncode}; pushed version {summary.get('pushed_version')}; backend "
          f"{summary.get('optimizer', {}).get('backend')}")


if __name__ == "__main__":
    main()
