"""Every Beam pipeline option tfx-bridge sets, in one place.

- :func:`direct_runner_args`: the DirectRunner, multi-process when asked.
- :func:`s3_args`: Beam's ``--s3_*`` options from the standard AWS variables
  (endpoint and region only; explicit options win).
- :func:`object_store_args`: what a pipeline touching ``s3://`` needs (the
  above, plus ``sdk_container_image``).
- :func:`set_filesystem_options`: Beam's FileSystems used outside a pipeline
  (planning an ingest) with a run's options.

TFX's BaseBeamExecutor builds an sdist of TFX itself (tens of MB, every Beam
executor run) whenever beam_pipeline_args are non-empty and name none of
extra_packages / setup_file / requirements_file / sdk_container_image. Empty
args avoid it; non-empty ones here carry ``sdk_container_image`` set to the
Beam SDK image matching the installed Beam, which the DirectRunner ignores and
a portable runner uses. Beam is imported only when an option needs it.

Example:
    >>> direct_runner_args(1)  # one process: no options, no sdist
    []
    >>> s3_args(env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"})
    ['--s3_endpoint_url=http://127.0.0.1:9000', '--s3_region_name=eu-west-1']
"""
from __future__ import annotations

import os
import sys
from typing import List, Mapping, Optional, Sequence

from tfx_bridge.storage import objectstore

# Options that tell TFX how to ship the user's code; one of them present, no sdist.
SHIPPING = ("--sdk_container_image", "--extra_package", "--setup_file",
             "--requirements_file")


def sdk_image() -> str:
    """The Beam SDK container image of the installed Beam and Python."""
    import apache_beam

    return (f"apache/beam_python{sys.version_info[0]}.{sys.version_info[1]}_sdk:"
            f"{apache_beam.__version__}")


def _has_option(args: Sequence[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def direct_runner_args(num_workers: Optional[int] = None) -> List[str]:
    """Args for the Beam DirectRunner; ``num_workers`` > 1 runs multi-process."""
    if num_workers is None or num_workers <= 1:
        return []
    return ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
            f"--direct_num_workers={num_workers}", f"--sdk_container_image={sdk_image()}"]


def s3_args(explicit: Sequence[str] = (), env: Mapping[str, str] = os.environ) -> List[str]:
    """Beam ``--s3_*`` options from the AWS variables, for those ``explicit`` lacks.

    Only the endpoint and region: Beam's boto3 client takes the keys from the
    environment itself, and pipeline options are stored (TFX keeps
    beam_pipeline_args in MLMD), so credentials never go into them.
    """
    wanted = {"--s3_endpoint_url": objectstore.endpoint_url(env),
              "--s3_region_name": objectstore.region(env)}
    return [f"{k}={v}" for k, v in wanted.items() if v and not _has_option(explicit, k)]


def object_store_args(paths: Sequence[Optional[str]], explicit: Optional[List[str]] = None
                      ) -> List[str]:
    """``explicit`` plus what Beam needs to reach the ``s3://`` paths among ``paths``
    (:func:`s3_args`), with ``sdk_container_image`` so TFX does not build an sdist
    per Beam run."""
    args = list(explicit or [])
    if not objectstore.uses_s3(paths):
        return args
    args += s3_args(args)
    if not any(a.startswith(SHIPPING) for a in args):
        args.append(f"--sdk_container_image={sdk_image()}")
    return args


def set_filesystem_options(args: Sequence[str]) -> None:
    """Makes Beam's FileSystems (used outside a pipeline, e.g. to plan an ingest)
    see ``args`` (Beam's S3 filesystem needs options even when they are empty)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions(list(args)))
