"""A write the machine refuses (a full disk, a read-only one) is named: the path, the
cause and the fix, exit 2, nothing half-written."""
from __future__ import annotations

import errno
import os
import subprocess

import pytest

from tfx_bridge import cli
from tfx_bridge.errors import ResourceError, resource_error


def test_resource_error_names_path_cause_and_fix_only_for_the_machines_refusals():
    named = resource_error(OSError(errno.ENOSPC, "No space left on device"), "/srv/models/x")
    assert isinstance(named, ResourceError)
    assert str(named).startswith("No space left on device (ENOSPC) while writing "
                                 "/srv/models/x: free space on that disk (df -h)")
    assert "read-only" in str(resource_error(OSError(errno.EROFS, "Read-only"), "/x"))
    assert resource_error(OSError(errno.ENOENT, "No such file"), "/x") is None


@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KiB tmpfs (mount needs CAP_SYS_ADMIN: skipped, and said, without it)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here to fill: {proc.stderr.strip()[:200]}")
    yield disk
    subprocess.run(["umount", str(disk)], check=False)


def test_cli_push_onto_a_full_disk_exit_2_naming_the_path_nothing_published(
        tiny_disk, tmp_path, capfd, scaled_saved_model):
    model = scaled_saved_model(str(tmp_path / "m"), asset_mb=1)  # bigger than the disk
    code = cli.main(["push", "--model", model, "--base-path", str(tiny_disk / "models"),
                     "--model-name", "ctr"])
    err = capfd.readouterr().err
    assert code == cli.EXIT_BAD_INPUT, err
    assert "No space left on device (ENOSPC) while copying the model into " \
           f"{tiny_disk / 'models' / 'ctr'}/.staging-" in err, err
    assert "free space on that disk" in err and "internal error" not in err
    root = tiny_disk / "models" / "ctr"
    assert [d for d in os.listdir(root) if not d.startswith(".")] == []  # no version
