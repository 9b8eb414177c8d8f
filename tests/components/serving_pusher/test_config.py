"""ServingPusher's one config: defaults and checks written once, JSON both ways."""
from __future__ import annotations

import pytest

from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.errors import PusherConfigError


def test_config_json_round_trip_equal_with_batching_overrides():
    config = PusherConfig(base_path="s3://b/models", model_name="ctr", label="canary",
                          batching_parameters={"max_batch_size": 64}, keep_versions=2,
                          cpu_allocator="malloc")
    assert PusherConfig.from_json(config.to_json()) == config


def test_config_zero_warmup_records_refused_not_defaulted():
    """0 is a value, refused whichever route gives it: never turned into the default."""
    with pytest.raises(PusherConfigError, match=r"warmup_records 0: use 1 to 1000"):
        PusherConfig.from_json('{"base_path": "/s", "model_name": "ctr", "warmup_records": 0}')


def test_config_every_bad_setting_named_in_one_refusal():
    with pytest.raises(PusherConfigError, match=r"^ServingPusher: Model name '7' is a number.*"
                       r"base path gs://b/m: ServingPusher publishes to local or mounted "
                       r"folders and to s3://.*label 'beta'.*target 'tpu'.*keep_versions "
                       r"must be >= 1, got 0.*unknown batching fields \['speed'\]"):
        PusherConfig(base_path="gs://b/m", model_name="7", label="beta", target="tpu",
                     keep_versions=0, batching_parameters={"speed": 1})


def test_config_missing_model_name_from_json_refused_by_name():
    with pytest.raises(PusherConfigError, match=r"missing 1 required positional argument: "
                       r"'model_name'"):
        PusherConfig.from_json('{"base_path": "/s"}')
