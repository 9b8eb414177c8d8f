"""The config base every component's one config builds on: typed fields, one
refusal naming every problem, JSON both ways."""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import pytest

from tfx_bridge.config import Config
from tfx_bridge.errors import BridgeError


class DemoError(BridgeError):
    pass


@dataclasses.dataclass(frozen=True)
class Demo(Config):
    COMPONENT = "Demo"
    ERROR = DemoError

    records: int = 10
    tolerance: float = 1e-4
    enabled: bool = True
    label: Optional[str] = None
    splits: Tuple[str, ...] = ("train",)
    overrides: Optional[dict] = None

    def problems(self):
        return [] if self.records > 0 else [f"records must be > 0, got {self.records}"]


def test_config_lists_become_tuples_ints_floats_and_json_round_trips():
    demo = Demo(records=3, tolerance=1, splits=["train", "eval"], overrides={"a": 1})
    assert demo.splits == ("train", "eval") and isinstance(demo.tolerance, float)
    assert Demo.from_json(demo.to_json()) == demo


def test_config_every_wrong_kind_named_in_one_typed_refusal():
    with pytest.raises(DemoError, match=r"^Demo: records must be an int, got True \(bool\); "
                       r"tolerance must be a number, got '1e-4' \(str\); splits must be a "
                       r"list of strings, got 'train' \(str\); overrides must be a JSON object"):
        Demo(records=True, tolerance="1e-4", splits="train", overrides=[1])


def test_config_item_of_wrong_kind_named_by_index():
    with pytest.raises(DemoError, match=r"splits\[1\] must be a string, got 2 \(int\)"):
        Demo(splits=["train", 2])


def test_config_own_checks_run_on_well_typed_fields():
    with pytest.raises(DemoError, match=r"^Demo: records must be > 0, got 0\.$"):
        Demo(records=0)


@pytest.mark.parametrize("text, match", [
    ('{"records": 3, "speed": "max"}', r"unexpected keyword argument 'speed'"),
    ("not json", r"Expecting value"),
    ("[1, 2]", r"a JSON object expected, got list"),
    ('{"records": -1}', r"^Demo: records must be > 0"),
])
def test_config_from_json_unknown_key_bad_json_or_bad_value_typed_refusal(text, match):
    with pytest.raises(DemoError, match=match):
        Demo.from_json(text)


def test_config_numpy_numbers_sets_and_zero_one_bools_taken_as_the_old_params_were():
    import numpy as np

    demo = Demo(records=np.int64(3), tolerance=np.float32(0.5), enabled=0,
                splits=(s for s in ["train"]))
    assert demo.records == 3 and type(demo.records) is int
    assert demo.tolerance == 0.5 and demo.enabled is False and demo.splits == ("train",)
    with pytest.raises(DemoError, match=r"enabled must be a bool, got 2"):
        Demo(enabled=2)


def test_config_dict_that_would_not_survive_json_refused_by_name():
    with pytest.raises(DemoError, match=r"overrides must hold only JSON values"):
        Demo(overrides={1: "int key"})
    with pytest.raises(DemoError, match=r"overrides must hold only JSON values"):
        Demo(overrides={"when": object()})


def test_config_defaults_read_without_building_a_config_with_required_fields():
    @dataclasses.dataclass(frozen=True)
    class Push(Config):
        base_path: str
        label: str = "stable"

    assert vars(Push.defaults()) == {"label": "stable"}
