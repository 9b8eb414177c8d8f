"""The SavedModels that ServingPusher's core tests (test_serving*.py) push."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def models(tmp_path_factory, scaled_saved_model):
    """"a" and "b" differ in weights only, "renamed" and "int" change the contract,
    "big" carries a 16 MiB asset (a push slow enough to be killed part-way)."""
    root = tmp_path_factory.mktemp("models")
    return {
        "a": scaled_saved_model(str(root / "a")),
        "b": scaled_saved_model(str(root / "b"), scale=3.0),
        "renamed": scaled_saved_model(str(root / "renamed"), input_name="features"),
        "int": scaled_saved_model(str(root / "int"), dtype="int64"),
        "big": scaled_saved_model(str(root / "big"), asset_mb=16),
    }
