"""TrtOptimizer's one config: defaults and checks written once, JSON both ways."""
from __future__ import annotations

import pytest

from tfx_bridge.components.trt_optimizer.config import OptimizerConfig
from tfx_bridge.components.trt_optimizer.errors import OptimizerConfigError
from tfx_bridge.components.trt_optimizer.results import DEFAULT_ITERATIONS


def test_config_json_round_trip_equal_and_lists_become_tuples():
    config = OptimizerConfig(iterations=30, op_denylist=["TopKV2", "Where"],
                             candidates=["frozen", "tflite"], fail_on_drift=False)
    assert config.op_denylist == ("TopKV2", "Where") and config.candidates == ("frozen", "tflite")
    assert OptimizerConfig.from_json(config.to_json()) == config


def test_config_every_bad_setting_named_in_one_refusal():
    with pytest.raises(OptimizerConfigError, match=r"precision 'fp8'.*topk_threshold must be "
                       r"in \(0, 1\], got 0.0.*iterations 3 is too few.*time_budget_s must be "
                       r"between 1 and 3600 seconds, got 0.0.*unknown candidates "
                       r"\['tvm'\].*workspace_bytes must be >= 1"):
        OptimizerConfig(precision="fp8", topk_threshold=0.0, iterations=3, candidates=["tvm"],
                        workspace_bytes=0, time_budget_s=0.0)


@pytest.mark.parametrize("settings, match", [
    ({"time_budget_s": float("nan")}, r"time_budget_s must be between 1 and 3600 seconds, "
                                      r"got nan"),
    ({"time_budget_s": float("inf")}, r"time_budget_s must be between"),
    ({"atol": float("nan")}, r"atol and rtol must be finite and >= 0, got nan"),
    ({"topk_threshold": float("nan")}, r"topk_threshold must be in \(0, 1\], got nan"),
    ({"iterations": 10**6}, r"iterations 1000000 is more than 100000"),
])
def test_config_not_finite_or_out_of_range_refused(settings, match):
    with pytest.raises(OptimizerConfigError, match=match):
        OptimizerConfig(**settings)


@pytest.mark.parametrize("text, match", [
    ('{"iterations": 30, "speed": "max"}', r"unexpected keyword argument 'speed'"),
    ("not json", r"Expecting value"),
])
def test_config_from_json_unknown_key_or_not_json_refused(text, match):
    with pytest.raises(OptimizerConfigError, match=match):
        OptimizerConfig.from_json(text)


def test_config_trt_options_are_the_engine_settings():
    config = OptimizerConfig(workspace_bytes=1 << 20, candidates=["frozen"])
    assert config.trt_options() == {"workspace_bytes": 1 << 20, "minimum_segment_size": 3,
                                    "maximum_cached_engines": 1}
    assert config.candidates == ("frozen",) and config.iterations == DEFAULT_ITERATIONS


def test_config_wrong_kind_refused_by_name_not_a_raw_type_error():
    with pytest.raises(OptimizerConfigError, match=r"^TrtOptimizer: iterations must be an int, "
                       r"got '30' \(str\)"):
        OptimizerConfig(iterations="30")
