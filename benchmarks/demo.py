"""Times the README's main command end to end: `tfx-bridge demo` in a fresh workdir.

Target: under 3 minutes on 2 cores. Reports total wall time and the
time of each progress step, from the CLI's own progress lines; then runs it
twice more in the same workdir (the reruns a cron job makes) and reports their
wall time and whether they pushed a new version.

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
    reruns = []
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        proc = subprocess.run([exe, "demo", "--workdir", tmp, "--json"], capture_output=True,
                              text=True)
        total = time.monotonic() - start
        for _ in range(2):
            again = time.monotonic()
            rerun = subprocess.run([exe, "demo", "--workdir", tmp, "--json"],
                                   capture_output=True, text=True)
            result = json.loads(rerun.stdout.strip().splitlines()[-1])
            reruns.append((time.monotonic() - again, result.get("new_push"),
                           result.get("served_versions")))
    steps = re.findall(r"^\[(\d)/\d\] (.*) \(([\d.]+)s\)$", proc.stderr, re.MULTILINE)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    print("| step | cumulative s |\n|---|---|")
    for n, text, seconds in steps:
        print(f"| {n}. {text[:70]} | {seconds} |")
    print(f"\nwall time incl. interpreter start: {total:.1f}s (target < 180s); exit "
          f"{proc.returncode}; pushed version {summary.get('pushed_version')}; backend "
          f"{summary.get('optimizer', {}).get('backend')}")
    for i, (seconds, new_push, served) in enumerate(reruns, start=2):
        print(f"run {i} in the same workdir: {seconds:.1f}s, new version pushed: {new_push}, "
              f"served versions {served}")


if __name__ == "__main__":
    main()
