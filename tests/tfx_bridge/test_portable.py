"""tfx_bridge.portable: ParquetExampleGen's Beam work through Beam's portable runner,
a local job service and external SDK workers on 127.0.0.1 started for the run,
gives the DirectRunner's split counts; the work ran in the pool's worker
processes (their log says each started; a DoFn there sees another pid, folder
and TMPDIR than the launcher's), and both services are stopped after."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfx_bridge import beam_runners, portable

pytestmark = pytest.mark.slow


def test_portable_local_services_run_ingest_in_external_workers_and_stop(tmp_path):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core

    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": list(range(600)), "s": [f"v{i % 7}" for i in range(600)]}),
                   str(tmp_path / "in" / "p.parquet"))
    plan = core.plan_ingest(str(tmp_path / "in"),
                            core.SplitConfig.parse("train:2,eval:1", "*.parquet"))
    direct = core.ingest(plan, str(tmp_path / "direct"), beam.Pipeline)
    settings = beam_runners.check(beam_runners.BeamSettings("portable", workers=2))
    logs = tmp_path / "logs"
    # The services and workers start elsewhere than the launcher's folder.
    (tmp_path / "elsewhere").mkdir()
    with portable.local_services(str(logs), cwd=str(tmp_path / "elsewhere")) as (job, pool):
        args = beam_runners.pipeline_args(settings, job, pool)
        assert f"--job_endpoint={job}" in args and "--environment_type=EXTERNAL" in args
        ported = core.ingest(plan, str(tmp_path / "portable"),
                             lambda: beam.Pipeline(options=PipelineOptions(args)))
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
    assert ported == direct and sum(direct.values()) == 600
    started = {ln.split('worker_id="', 1)[1].split('"', 1)[0]
               for ln in (logs / portable.WORKER_POOL_LOG).read_text().splitlines()
               if ln.startswith("Starting worker with command")}
    # Two workers for each of the two jobs.
    assert started == {f"worker_{i}" for i in range(4)}, (
        logs / portable.WORKER_POOL_LOG).read_text()
    assert not portable._listening(port)  # stopped
    assert sorted(os.listdir(tmp_path / "portable")) == sorted(os.listdir(tmp_path / "direct"))
