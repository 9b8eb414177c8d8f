"""PipelineConfig: a run's settings checked together, replaced by name, refused by name."""
from __future__ import annotations

import pytest

from tfx_bridge.pipelines.config import PipelineConfig, PipelineConfigError


def test_pipeline_config_bad_settings_refused_naming_each():
    with pytest.raises(PipelineConfigError) as refused:
        PipelineConfig(train_steps=0, auc_floor=2.0, lock_timeout_s=float("inf"))
    message = str(refused.value)
    assert message.startswith("pipeline: ")
    for needle in ("train_steps must be >= 1, got 0", "auc_floor must be in [0, 1]",
                   "lock_timeout_s must be a number of seconds >= 0, got inf"):
        assert needle in message, message


def test_pipeline_config_wrong_type_refused():
    with pytest.raises(PipelineConfigError, match="optimizer_iterations must be an int"):
        PipelineConfig(optimizer_iterations="50")


def test_pipeline_config_updated_replaces_and_checks_again():
    config = PipelineConfig(train_steps=30).updated(model_name="ctr_v2", evaluate=False)
    assert (config.train_steps, config.model_name, config.evaluate) == (30, "ctr_v2", False)
    with pytest.raises(PipelineConfigError, match=r"unknown settings \['steps'\]"):
        config.updated(steps=3)
    with pytest.raises(PipelineConfigError, match="train_steps must be >= 1"):
        config.updated(train_steps=-1)


def test_pipeline_config_round_trips_as_json():
    config = PipelineConfig(optimizer_candidates=["frozen"], custom_config={"num_workers": 2},
                            inputs=["x:float32:-1,8"])
    assert PipelineConfig.from_json(config.to_json()) == config
    assert config.optimizer_candidates == ("frozen",)
