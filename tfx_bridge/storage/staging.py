"""An output folder replaced only by a run that succeeds.

The CLI's ``--output`` may already hold an earlier run's results. Writing into
it directly leaves a mix after a failed or smaller run (an old ``Split-test/``
beside new splits, an old ``report.json`` saying blessed beside a removed
SavedModel). Instead a run writes into a hidden staging folder inside the
output; only when it succeeds are the earlier entries moved aside, the new
ones moved in and the earlier ones deleted. A failed run deletes its staging
folder and leaves the earlier results as they were.

An output holding entries the verb does not write (someone's own files) is
refused rather than cleared. Paths may be URIs (tfx_bridge.storage.fs).

Example:
    >>> import os, tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "out")
    >>> with staged_output(out, ("report.md",), "demo") as stage:
    ...     with open(os.path.join(stage, "report.md"), "w") as f:
    ...         _ = f.write("new")
    >>> sorted(os.listdir(out))
    ['report.md']
"""
from __future__ import annotations

import contextlib
import fnmatch
import uuid
from typing import Iterator, Sequence

from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs
from tfx_bridge.storage.names import child

STAGING_PREFIX = ".tfx-bridge-staging-"
REPLACED_PREFIX = ".tfx-bridge-replaced-"


class StagingError(BridgeError):
    """An output folder the run may not replace (a file, or someone's own entries)."""


@contextlib.contextmanager
def staged_output(output: str, owned: Sequence[str], verb: str) -> Iterator[str]:
    """Yields a staging folder inside ``output``; on success its entries replace
    ``output``'s. ``owned`` are the glob patterns of the top-level entries the
    verb writes; an existing output holding anything else is refused.
    """
    if fs.isfile(output):
        raise StagingError(f"--output {output} is a file. Give a folder (new or from an earlier "
                    f"`{verb}` run).")
    if fs.isdir(output):
        entries = fs.listdir(output)
        leftovers = [e for e in entries if e.startswith((STAGING_PREFIX, REPLACED_PREFIX))]
        for e in leftovers:  # from a run killed before it cleaned up
            fs.remove(child(output, e))
        foreign = [e for e in entries if e not in leftovers
                   and not any(fnmatch.fnmatchcase(e, p) for p in owned)]
        if foreign:
            raise StagingError(
                f"--output {output} holds {foreign[:5]}{' ...' if len(foreign) > 5 else ''}, "
                f"which `{verb}` does not write (it writes {list(owned)}); nothing was "
                "changed. Give a new or empty folder, or one an earlier run of this verb "
                "wrote.")
    created = not fs.isdir(output)
    fs.makedirs(output)
    run_id = uuid.uuid4().hex[:12]
    stage = child(output, STAGING_PREFIX + run_id)
    fs.makedirs(stage)
    try:
        yield stage
    except BaseException:
        fs.remove(stage)
        # A refused first run leaves no folder (nor fails again on one removed meanwhile).
        if created and fs.isdir(output) and not fs.listdir(output):
            fs.remove(output)
        raise
    _swap_in(output, stage, child(output, REPLACED_PREFIX + run_id))


def _swap_in(output: str, stage: str, replaced: str) -> None:
    """Earlier entries aside, new ones in, earlier ones deleted. On local disk
    each move is a rename; on object stores a copy and a delete."""
    old = [e for e in fs.listdir(output) if not e.startswith((STAGING_PREFIX, REPLACED_PREFIX))]
    if old:
        fs.makedirs(replaced)
        for e in old:
            fs.rename(child(output, e), child(replaced, e))
    for e in fs.listdir(stage):
        fs.rename(child(stage, e), child(output, e))
    fs.remove(stage)
    fs.remove(replaced)


def final_path(path: str, stage: str, output: str) -> str:
    """Where ``path`` (inside ``stage``) is after the swap."""
    if path == stage or path.startswith(stage.rstrip("/") + "/"):
        return output.rstrip("/") + path[len(stage.rstrip("/")):]
    return path
