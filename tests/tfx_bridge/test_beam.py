"""tfx_bridge.beam: every Beam option tfx-bridge sets."""
from __future__ import annotations

from tfx_bridge import beam

ENV = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "eu-west-1",
       "AWS_ENDPOINT_URL": "https://minio.example:9000"}


def test_s3_args_endpoint_and_region_never_credentials():
    assert beam.s3_args(env=ENV) == ["--s3_endpoint_url=https://minio.example:9000",
                                     "--s3_region_name=eu-west-1"]


def test_s3_args_explicit_options_win():
    explicit = ["--s3_endpoint_url=http://other:1", "--runner=DirectRunner"]
    assert beam.s3_args(explicit, env=ENV) == ["--s3_region_name=eu-west-1"]


def test_object_store_args_s3_paths_get_sdk_image_local_paths_nothing(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    assert beam.object_store_args(["/data", None]) == []
    args = beam.object_store_args(["s3://b/data"], ["--runner=DirectRunner"])
    assert args[:2] == ["--runner=DirectRunner", "--s3_endpoint_url=https://minio.example:9000"]
    assert args[-1] == f"--sdk_container_image={beam.sdk_image()}"
    # A way to ship the code already given: no image added (TFX builds no sdist then).
    assert beam.object_store_args(["s3://b/x"], ["--setup_file=./setup.py"])[-1] != args[-1]


def test_direct_runner_args_one_process_empty_several_multi_processing():
    assert beam.direct_runner_args(None) == beam.direct_runner_args(1) == []
    assert "--direct_num_workers=3" in beam.direct_runner_args(3)
