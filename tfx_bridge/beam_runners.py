"""Which Beam runner a pipeline's Beam steps run on, checked before anything runs.

``tfx-bridge run`` / ``demo`` and ``create_pipeline`` take a runner name and
pass-through arguments; :func:`check` refuses, all at once, a preset that cannot
work (exit 2), and :func:`pipeline_args` turns the settings into Beam options.

- ``direct``: the DirectRunner in this process, or ``workers`` processes.
- ``portable``: Beam's PortableRunner with EXTERNAL SDK workers. Given
  ``job_endpoint`` and ``environment_config`` (a cluster's job service and
  worker pool), those; else the caller starts a local job service and worker
  pool on 127.0.0.1 (``tfx_bridge.portable``).
- ``flink``: ``--flink_master`` (a cluster's REST address) and a
  ``--flink_version`` the installed Beam publishes a job server for.
- ``spark``: ``--spark_master_url`` (Spark 3; Beam dropped Spark 2).
- ``dataflow``: ``--project``, ``--region``, a ``gs://`` ``--temp_location``
  and ``--sdk_container_image`` or ``--extra_package`` naming this package's
  wheel (else TFX builds an sdist of itself every run).

No TFX imports; Beam is imported only to read its published versions.

Example:
    >>> check(BeamSettings("flink", ("--flink_master=flink:8081", "--flink_version=1.12")))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.beam_runners.RunnerSettingsError: --beam-runner flink: --flink_version 1.12 ...
"""
from __future__ import annotations

import dataclasses
import re
from typing import List, Optional, Sequence, Tuple

from tfx_bridge.errors import BridgeError

RUNNERS = ("direct", "portable", "flink", "spark", "dataflow")
_HOST_PORT = re.compile(r"[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}")


class RunnerSettingsError(BridgeError):
    """A Beam runner preset that cannot work, found before the pipeline starts."""


@dataclasses.dataclass(frozen=True)
class BeamSettings:
    """A runner name, pass-through Beam arguments, and the portable runner's
    endpoints (or local workers)."""

    runner: str = "direct"
    args: Tuple[str, ...] = ()
    workers: Optional[int] = None
    job_endpoint: Optional[str] = None
    environment_config: Optional[str] = None

    @property
    def local_portable(self) -> bool:
        """Portable without a cluster: the caller starts local services."""
        return self.runner == "portable" and self.job_endpoint is None


def arg_value(args: Sequence[str], name: str) -> Optional[str]:
    """The value of ``--name=V`` or ``--name V`` in ``args`` (the last one), or None."""
    value = None
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            value = a[len(name) + 1:]
        elif a == name and i + 1 < len(args):
            value = args[i + 1]
    return value


def flink_versions() -> List[str]:
    """The Flink versions the installed Beam publishes job servers for."""
    from apache_beam.options.pipeline_options import FlinkRunnerOptions

    return list(FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS)


def problems(settings: BeamSettings) -> List[str]:
    """Every reason ``settings`` cannot run, in words (empty: it can)."""
    runner, args = settings.runner, tuple(settings.args)
    if runner not in RUNNERS:
        return [f"unknown runner {runner!r}; use one of {', '.join(RUNNERS)}"]
    found = []
    if any(a.startswith("--runner") for a in args):
        found.append("give the runner with --beam-runner, not --beam-arg --runner=...")
    if settings.workers is not None and settings.workers < 1:
        found.append(f"--beam-workers {settings.workers}: give 1 or more")
    if settings.workers is not None and runner not in ("direct", "portable"):
        found.append(f"--beam-workers is for direct and portable; size a {runner} cluster "
                     "with its own options (--beam-arg, e.g. --parallelism for Flink)")
    endpoints = (settings.job_endpoint, settings.environment_config)
    if runner != "portable" and any(e is not None for e in endpoints):
        found.append("--job-endpoint and --environment-config are for --beam-runner portable")
    if runner == "portable":
        if (endpoints[0] is None) != (endpoints[1] is None):
            found.append("give --job-endpoint and --environment-config together (a cluster's "
                         "job service and its worker pool), or neither to start both here")
        for flag, value in zip(("--job-endpoint", "--environment-config"), endpoints,
                               strict=True):
            if value is not None and not _HOST_PORT.fullmatch(value):
                found.append(f"{flag} {value!r}: give HOST:PORT")
    elif runner == "flink":
        master = arg_value(args, "--flink_master")
        if not master or master in ("[auto]", "[local]"):
            found.append("--beam-arg --flink_master=HOST:PORT is required: the Flink "
                         "cluster's REST address (a local Flink would need its job-server "
                         "jar fetched at run time)")
        version = arg_value(args, "--flink_version")
        if version is not None and version not in flink_versions():
            found.append(f"--flink_version {version} is not one Beam publishes a job server "
                         f"for; use one of {', '.join(flink_versions())} (TFX's own Flink "
                         "example passes 1.12, which this Beam refuses)")
    elif runner == "spark":
        if not arg_value(args, "--spark_master_url"):
            found.append("--beam-arg --spark_master_url=spark://HOST:7077 is required: the "
                         "Spark 3 cluster's master")
        version = arg_value(args, "--spark_version")
        if version is not None and version != "3":
            found.append(f"--spark_version {version}: Beam runs Spark 3 only (its Spark 2 "
                         "runner was removed); use a Spark 3 cluster")
    elif runner == "dataflow":
        for name, example in (("--project", "my-project"), ("--region", "us-central1")):
            if not arg_value(args, name):
                found.append(f"--beam-arg {name}={example} is required")
        temp = arg_value(args, "--temp_location")
        if not temp or not temp.startswith("gs://"):
            found.append("--beam-arg --temp_location=gs://BUCKET/tmp is required (Dataflow "
                         "stages on GCS)")
        package = arg_value(args, "--extra_package")
        if not arg_value(args, "--sdk_container_image") and not (
                package and package.endswith(".whl")):
            found.append("give --beam-arg --sdk_container_image=IMAGE (this package "
                         "installed) or --beam-arg --extra_package=tfx_bridge-*.whl: without "
                         "either, TFX builds an sdist of itself on every run")
    return found


def check(settings: BeamSettings) -> BeamSettings:
    """``settings`` if they can work, else :class:`RunnerSettingsError` with every
    problem at once."""
    found = problems(settings)
    if found:
        raise RunnerSettingsError(f"--beam-runner {settings.runner}: " + "; ".join(found)
                                  + ".")
    return settings


def pipeline_args(settings: BeamSettings, job_endpoint: Optional[str] = None,
                  environment_config: Optional[str] = None) -> List[str]:
    """Beam options for checked ``settings``; a local portable run passes the
    endpoints of the services it started."""
    from tfx_bridge import beam

    args = list(settings.args)
    if settings.runner == "direct":
        return beam.direct_runner_args(settings.workers) + args
    if settings.runner == "portable":
        endpoint = settings.job_endpoint or job_endpoint
        config = settings.environment_config or environment_config
        if endpoint is None or config is None:
            raise RunnerSettingsError("a local portable run needs the endpoints of the "
                                      "services it started")
        out = ["--runner=PortableRunner", f"--job_endpoint={endpoint}",
               "--environment_type=EXTERNAL", f"--environment_config={config}"]
        if settings.workers and arg_value(args, "--sdk_worker_parallelism") is None:
            # A cluster's job service reads the first; Beam's local one (its
            # FnApiRunner) sizes its worker pool by the second.
            out += [f"--sdk_worker_parallelism={settings.workers}",
                    f"--direct_num_workers={settings.workers}"]
        if not any(arg_value(args, name) for name in beam.SHIPPING):
            # EXTERNAL workers run this install; the image option only keeps TFX from
            # building an sdist of itself for every Beam step.
            out.append(f"--sdk_container_image={beam.sdk_image()}")
        return out + args
    runner = {"flink": "FlinkRunner", "spark": "SparkRunner",
              "dataflow": "DataflowRunner"}[settings.runner]
    return [f"--runner={runner}", *args]
