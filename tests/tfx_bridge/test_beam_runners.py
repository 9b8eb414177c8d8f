"""tfx_bridge.beam_runners: each runner preset that cannot work is refused before
anything runs, naming every problem; the ones that can become Beam options."""
from __future__ import annotations

import pytest

from tfx_bridge import cli
from tfx_bridge.beam_runners import (
    BeamSettings,
    RunnerSettingsError,
    check,
    flink_versions,
    pipeline_args,
)


@pytest.mark.parametrize("settings, needles", [
    (BeamSettings("flink", ("--flink_version=1.12",)),
     ["--flink_master=HOST:PORT is required", "--flink_version 1.12 is not one Beam "
      "publishes a job server for; use one of 1.17, 1.18, 1.19"]),
    (BeamSettings("flink", ("--flink_master", "[local]")), ["--flink_master=HOST:PORT"]),
    (BeamSettings("spark", ("--spark_version=2",)),
     ["--spark_master_url=spark://HOST:7077 is required",
      "--spark_version 2: Beam runs Spark 3 only"]),
    (BeamSettings("dataflow", ("--project=p", "--temp_location=/tmp/x")),
     ["--region=us-central1 is required", "--temp_location=gs://BUCKET/tmp is required",
      "--sdk_container_image=IMAGE"]),
    (BeamSettings("dataflow", ("--project=p", "--region=r", "--temp_location=gs://b/t",
                               "--extra_package=dist/tfx_bridge-0.1.0.tar.gz")),
     ["--extra_package=tfx_bridge-*.whl"]),
    (BeamSettings("portable", job_endpoint="jobs:8099"),
     ["give --job-endpoint and --environment-config together"]),
    (BeamSettings("portable", job_endpoint="jobs", environment_config="pool:50000"),
     ["--job-endpoint 'jobs': give HOST:PORT"]),
    (BeamSettings("direct", ("--runner=FlinkRunner",), job_endpoint="jobs:8099"),
     ["give the runner with --beam-runner", "are for --beam-runner portable"]),
    (BeamSettings("samza"), ["unknown runner 'samza'"]),
    (BeamSettings("spark", ("--spark_master_url=spark://m:7077",), workers=4),
     ["--beam-workers is for direct and portable"]),
])
def test_beam_preset_that_cannot_work_refused_naming_every_problem(settings, needles):
    with pytest.raises(RunnerSettingsError) as refused:
        check(settings)
    for needle in needles:
        assert needle in str(refused.value), str(refused.value)


def test_beam_preset_flink_versions_are_beams_own():
    from apache_beam.options.pipeline_options import FlinkRunnerOptions

    assert flink_versions() == FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS


def test_beam_presets_that_can_work_become_options():
    flink = check(BeamSettings("flink", ("--flink_master=flink:8081", "--flink_version=1.18")))
    assert pipeline_args(flink) == ["--runner=FlinkRunner", "--flink_master=flink:8081",
                                    "--flink_version=1.18"]
    spark = check(BeamSettings("spark", ("--spark_master_url=spark://m:7077",)))
    assert pipeline_args(spark) == ["--runner=SparkRunner", "--spark_master_url=spark://m:7077"]
    portable = check(BeamSettings("portable", workers=2, job_endpoint="jobs:8099",
                                  environment_config="pool:50000"))
    args = pipeline_args(portable)
    assert args[:6] == ["--runner=PortableRunner", "--job_endpoint=jobs:8099",
                        "--environment_type=EXTERNAL", "--environment_config=pool:50000",
                        "--sdk_worker_parallelism=2", "--direct_num_workers=2"]
    assert args[6].startswith("--sdk_container_image=")  # no per-run sdist of TFX
    assert pipeline_args(check(BeamSettings("direct"))) == []


def test_cli_run_beam_preset_refused_before_anything_runs(tmp_path, capfd):
    code = cli.main(["run", "--data-root", str(tmp_path / "data"), "--serving-base-path",
                     str(tmp_path / "s"), "--workdir", str(tmp_path / "w"), "--beam-runner",
                     "flink", "--beam-arg=--flink_version=1.12"])
    err = capfd.readouterr().err
    assert code == cli.EXIT_BAD_INPUT, err
    assert "--flink_version 1.12 is not one Beam publishes" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing made


def test_cli_compile_kfp_portable_without_the_clusters_endpoints_refused(tmp_path, capfd):
    code = cli.main(["compile-kfp", "--output", str(tmp_path / "p.json"), "--pipeline-root",
                     "gs://b/root", "--data-root", "gs://b/data", "--image", "img:1",
                     "--beam-runner", "portable"])
    err = capfd.readouterr().err
    assert code == cli.EXIT_BAD_INPUT, err
    assert "give the cluster's --job-endpoint and --environment-config" in err
    assert not (tmp_path / "p.json").exists()
