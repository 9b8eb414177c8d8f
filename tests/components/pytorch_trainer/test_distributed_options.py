"""PyTorchTrainer's distributed option: custom_config num_workers checked, and what a
rank calls (the run_fn itself when importable by name, else its exec properties)."""
from __future__ import annotations

import pytest

from tfx_bridge import cli
from tfx_bridge.components.pytorch_trainer import executor
from tfx_bridge.components.pytorch_trainer.errors import RunFnError


@pytest.mark.parametrize("value", [0, -2, 1.5, "2", True])
def test_trainer_num_workers_not_a_positive_int_refused(value):
    with pytest.raises(RunFnError, match=r"custom_config num_workers=.*give a whole number"):
        executor.num_workers({"num_workers": value})


def test_trainer_num_workers_default_one():
    assert executor.num_workers(None) == 1 and executor.num_workers({"seed": 3}) == 1
    assert executor.num_workers({"num_workers": 4}) == 4


def test_trainer_rank_takes_an_importable_run_fn_else_its_exec_properties():
    from tfx_bridge.pipelines import demo_trainer

    assert executor._rank_fn(demo_trainer.run_fn, {}) is demo_trainer.run_fn
    namespace = {}
    exec("def run_fn(fn_args):\n    pass\n", namespace)  # a module loaded from source
    props = {"run_fn": "x.run_fn", "custom_config": '{"num_workers": 2}', "blob": object()}
    assert executor._rank_fn(namespace["run_fn"], props) == {
        "run_fn": "x.run_fn", "custom_config": '{"num_workers": 2}'}
    # A module file or TFX's wheel: loaded again from the properties, even when this
    # process can import the function by name.
    wheel = {"module_path": "ctr_trainer@/root/_wheels/u.whl", "run_fn": None}
    assert executor._rank_fn(demo_trainer.run_fn, wheel) == wheel


def test_cli_run_trainer_workers_in_hand_over_mode_refused(tmp_path, capfd):
    code = cli.main(["run", "--data-root", str(tmp_path), "--serving-base-path",
                     str(tmp_path / "s"), "--workdir", str(tmp_path / "w"), "--model-source",
                     str(tmp_path / "m"), "--trainer-workers", "2"])
    assert code == cli.EXIT_BAD_INPUT
    assert "--trainer-workers trains in the pipeline" in capfd.readouterr().err
