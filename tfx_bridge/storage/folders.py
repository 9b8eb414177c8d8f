"""Model folders are untrusted: symlinks inside them must not lead out, and
nothing in them may hang a reader.

Shared by the importer and the pusher. A link that resolves outside the folder
(a file such as /etc/hostname, a directory elsewhere) or into a loop is refused;
a link that stays inside is followed, so what is checked and what is copied
are the same bytes. No TFX imports; local folders only (object stores have no
symlinks).

Example:
  >>> import os, tempfile
  >>> folder = tempfile.mkdtemp()
  >>> os.symlink("/etc/hostname", os.path.join(folder, "leak.txt"))
  >>> unsafe_links(folder)
  ['leak.txt -> /etc/hostname (outside the folder)']
"""
from __future__ import annotations

import os
from typing import List

from tfx_bridge.storage.names import is_inside, kind_of


def unsafe_links(folder: str) -> List[str]:
    """Every symlink under ``folder`` that resolves outside it or into a loop, and
    every entry that is neither a file nor a folder (a FIFO, socket or device:
    reading or copying it would hang)."""
    import stat

    if "://" in folder:
        return []
    root = os.path.realpath(folder)
    problems = []
    for dirpath, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                mode = os.lstat(path).st_mode
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    problems.append(f"{os.path.relpath(path, folder)} ({kind_of(mode)}: "
                                    "reading it would hang)")
                continue
            target = os.path.realpath(path)
            rel = os.path.relpath(path, folder)
            if not is_inside(target, root):
                problems.append(f"{rel} -> {os.readlink(path)} (outside the folder)")
            elif not os.path.exists(target):
                problems.append(f"{rel} -> {os.readlink(path)} (dangling)")
            elif os.path.isdir(target) and is_inside(dirpath, target):
                problems.append(f"{rel} -> {os.readlink(path)} (a loop: it contains itself)")
    return problems
