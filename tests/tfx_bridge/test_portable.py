"""tfx_bridge.portable: Beam work through Beam's portable runner, a local job
service and external SDK workers on 127.0.0.1 started for the run, runs in the
pool's worker processes (their log says each started; a DoFn there sees another
pid, folder and TMPDIR than the launcher's), and both services are stopped
after. The demo pipeline under these services, compared with the DirectRunner,
is tests/pipelines/test_lifecycle.py's."""
from __future__ import annotations

import os

import pytest

from tfx_bridge import beam_runners, portable

pytestmark = pytest.mark.slow


def test_portable_local_services_run_work_in_external_workers_and_stop(tmp_path):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    settings = beam_runners.check(beam_runners.BeamSettings("portable", workers=2))
    logs = tmp_path / "logs"
    # The services and workers start elsewhere than the launcher's folder.
    (tmp_path / "elsewhere").mkdir()
    with portable.local_services(str(logs), cwd=str(tmp_path / "elsewhere")) as (job, pool):
        args = beam_runners.pipeline_args(settings, job, pool)
        assert f"--job_endpoint={job}" in args and "--environment_type=EXTERNAL" in args
        port = int(job.rsplit(":", 1)[1])
        where = str(tmp_path / "where.txt")
        # What a worker sees: its folder, its TMPDIR, its pid (os.path's functions,
        # importable on any worker; a test module's function is not).
        with beam.Pipeline(options=PipelineOptions(args)) as p:
            _ = (p | beam.Create([".", "$TMPDIR", "/proc/self"])
                 | beam.Map(os.path.expandvars) | beam.Map(os.path.realpath)
                 | beam.io.WriteToText(where, shard_name_template=""))
    seen = set(open(where).read().split())
    pid = [int(s.split("/")[-1]) for s in seen if s.startswith("/proc/")]
    tmp = [s for s in seen if s.startswith(os.path.realpath(logs / "workers-tmp-"))]
    assert os.path.realpath(tmp_path / "elsewhere") in seen and pid[0] != os.getpid(), seen
    assert len(tmp) == 1 and not os.path.exists(tmp[0]), seen  # its own, removed after
    # Each worker forked from the pool's warm process, not a new interpreter.
    started = {ln.split()[3]: int(ln.split()[-1])
               for ln in (logs / portable.WORKER_POOL_LOG).read_text().splitlines()
               if ln.startswith(portable.FORKED)}
    assert set(started) == {"worker_0", "worker_1"}, (logs / portable.WORKER_POOL_LOG).read_text()
    assert set(pid) <= set(started.values()), (seen, started)
    assert not portable._listening(port)  # stopped
