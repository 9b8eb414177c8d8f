"""tfx_bridge.torch.model: the JSON files of a PyTorch model folder, read with a size
cap, each refusal naming the file and the fix."""
from __future__ import annotations

import pytest

from tfx_bridge.limits import LimitError
from tfx_bridge.torch import model as torch_model


def test_trained_on_round_trip_and_unreadable_record_gives_none(tmp_path):
    torch_model.record_trained_on(str(tmp_path), "/root/Examples/7", "sha256:ab")
    assert torch_model.trained_on(str(tmp_path)) == "/root/Examples/7"
    assert torch_model.trained_recipe(str(tmp_path)) == "sha256:ab"
    (tmp_path / torch_model.TRAINED_ON_FILE).write_text("[1, 2")
    assert torch_model.trained_on(str(tmp_path)) is None


def test_read_spec_over_one_mib_refused_before_parsing(tmp_path):
    (tmp_path / torch_model.SPEC_FILE).write_text(" " * ((1 << 20) + 1))
    with pytest.raises(torch_model.TorchModelError,
                       match=r"model_spec\.json is 1,048,577 bytes, over the 1,048,576"):
        torch_model.read_spec(str(tmp_path))


def test_read_metrics_not_json_refused_with_the_fix(tmp_path):
    (tmp_path / torch_model.METRICS_FILE).write_text("{auc: 1}")
    with pytest.raises(torch_model.TorchModelError,
                       match=r"is not JSON .*Rewrite it with tfx_bridge\.torch\.model\.save"):
        torch_model.read_metrics(str(tmp_path))


def test_read_metrics_nested_too_deep_refused_as_a_limit(tmp_path):
    (tmp_path / torch_model.METRICS_FILE).write_text("[" * 100 + "]" * 100)
    with pytest.raises(LimitError, match=r"nests 100 levels deep"):
        torch_model.read_metrics(str(tmp_path))
