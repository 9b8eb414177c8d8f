"""Beam pipeline args for local runs that do not trigger TFX's per-run sdist.

TFX's BaseBeamExecutor builds an sdist of TFX itself (tens of MB, every Beam
executor run) whenever beam_pipeline_args are non-empty and name none of
extra_packages / setup_file / requirements_file / sdk_container_image. Empty
args avoid it; multi-process DirectRunner args carry ``sdk_container_image``
set to the Beam SDK image matching the pinned Beam, which the DirectRunner
ignores and a portable runner would use.
"""
from __future__ import annotations

import sys
from typing import List, Optional

import apache_beam as beam

_PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
BEAM_SDK_IMAGE = f"apache/beam_python{_PY}_sdk:{beam.__version__}"


def direct_runner_args(num_workers: Optional[int] = None) -> List[str]:
    """Args for the Beam DirectRunner; ``num_workers`` > 1 runs multi-process."""
    if num_workers is None or num_workers <= 1:
        return []
    return [
        "--runner=DirectRunner",
        "--direct_running_mode=multi_processing",
        f"--direct_num_workers={num_workers}",
        f"--sdk_container_image={BEAM_SDK_IMAGE}",
    ]


def object_store_args(paths, explicit: Optional[List[str]] = None) -> List[str]:
    """``explicit`` plus what Beam needs to reach the ``s3://`` paths among ``paths``
    (endpoint and region from the AWS variables, unless given), with
    ``sdk_container_image`` so TFX does not build an sdist per Beam run."""
    from tfx_bridge.storage import objectstore

    args = list(explicit or [])
    if not objectstore.uses_s3(paths):
        return args
    args += objectstore.beam_s3_args(args)
    if not any(a.startswith(("--sdk_container_image", "--extra_package", "--setup_file",
                             "--requirements_file")) for a in args):
        args.append(f"--sdk_container_image={BEAM_SDK_IMAGE}")
    return args
