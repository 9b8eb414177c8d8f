"""PyTorchTrainer's build and its check of what the run_fn saved; the shared
torch_model and torch_training helpers a run_fn calls."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge.components.pytorch_trainer import PyTorchTrainer, TrainerOutputError  # noqa: E402
from tfx_bridge.components.pytorch_trainer.check import check_trained  # noqa: E402
from tfx_bridge.components.pytorch_trainer.executor import Executor  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402
from tfx_bridge.torch import training as torch_training  # noqa: E402

SPEC = torch_model.ModelSpec("torch.nn:Linear", {"in_features": 2, "out_features": 1},
                             ["x:float32:-1,2"], ["y"])


def test_pytorch_trainer_is_stock_trainer_with_bridge_executor():
    from tfx import v1 as tfx
    from tfx.types import channel, standard_artifacts

    trainer = PyTorchTrainer(examples=channel.Channel(type=standard_artifacts.Examples),
                             run_fn="tfx_bridge.pipelines.demo_trainer.run_fn",
                             train_args=tfx.proto.TrainArgs(num_steps=3))
    assert isinstance(trainer, tfx.components.Trainer)
    assert trainer.executor_spec.executor_class is Executor
    assert trainer.outputs["model"].type_name == "Model"


def test_check_trained_nothing_saved_says_how(tmp_path):
    with pytest.raises(TrainerOutputError, match=r"run_fn wrote no model.*torch\.model\.save"):
        check_trained(str(tmp_path))


def test_check_trained_spec_not_rebuilding_weights_refused(tmp_path):
    torch_model.save(str(tmp_path), torch.nn.Linear(3, 1), SPEC)
    with pytest.raises(TrainerOutputError,
                       match=r"does not rebuild its weights: torch\.nn:Linear.*size mismatch"):
        check_trained(str(tmp_path))


def test_check_trained_valid_model_returns_spec_and_metrics(tmp_path):
    torch_model.save(str(tmp_path), torch.nn.Linear(2, 1), SPEC, {"eval_auc": 0.75})
    spec, metrics = check_trained(str(tmp_path))
    assert spec == SPEC and metrics == {"eval_auc": 0.75}


def test_check_trained_spec_naming_a_callable_not_module_refused_before_call(tmp_path):
    torch_model.save(str(tmp_path), torch.nn.Linear(2, 1), SPEC)
    path = tmp_path / torch_model.SPEC_FILE
    marker = tmp_path / "ran"
    data = {**json.loads(path.read_text()), "module_class": "os:system",
            "module_kwargs": {"command": f"touch {marker}"}}
    path.write_text(json.dumps(data))
    with pytest.raises(TrainerOutputError,
                       match=r"'os:system' is builtin_function_or_method 'system', not a "
                             r"torch\.nn\.Module subclass"):
        check_trained(str(tmp_path))
    assert not marker.exists()


@pytest.mark.parametrize("change, message", [
    ({"module_class": "os.system"}, r"module_class 'os\.system' is not 'pkg\.mod:Class'"),
    ({"inputs": ["x:float99:-1"]}, r"inputs: .*dtype 'float99'"),
    ({"outputs": []}, r"outputs \[\] is not a list of names"),
    ({"weights": "../../etc/passwd"}, r"weights '\.\./\.\./etc/passwd': must be 'weights\.pt'"),
])
def test_read_spec_invalid_field_named(tmp_path, change, message):
    torch_model.save(str(tmp_path), torch.nn.Linear(2, 1), SPEC)
    path = tmp_path / torch_model.SPEC_FILE
    data = {**json.loads(path.read_text()), **change}
    path.write_text(json.dumps(data))
    with pytest.raises(torch_model.TorchModelError, match=message):
        torch_model.read_spec(str(tmp_path))


def test_read_spec_not_json_names_file(tmp_path):
    (tmp_path / torch_model.SPEC_FILE).write_bytes(b"\xff\xfe{")
    with pytest.raises(torch_model.TorchModelError, match=r"model_spec\.json is not JSON"):
        torch_model.read_spec(str(tmp_path))


def test_load_state_dict_pickled_code_refused(tmp_path):
    torch.save({"w": torch.zeros(1), "code": os.getcwd}, tmp_path / torch_model.WEIGHTS_FILE)
    with pytest.raises(torch_model.TorchModelError, match="not a tensors-only state_dict"):
        torch_model.load_state_dict(str(tmp_path))


def test_save_non_finite_metric_refused(tmp_path):
    with pytest.raises(torch_model.TorchModelError, match="finite numbers"):
        torch_model.save(str(tmp_path), torch.nn.Linear(2, 1), SPEC, {"eval_loss": float("nan")})


def test_binary_auc_matches_sklearn_with_ties():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 500)
    scores = np.round(rng.random(500) + labels * 0.3, 1)  # many ties
    assert torch_training.binary_auc(scores, labels) == pytest.approx(
        roc_auc_score(labels, scores), abs=1e-12)
    assert torch_training.binary_auc(scores, np.zeros(500)) is None


def test_fit_non_finite_loss_stops_with_step():
    model = torch.nn.Linear(1, 1)
    batches = [{"x": torch.ones(2, 1)}] * 3

    def loss(m, b):
        return m(b["x"]).sum() * float("inf")

    with pytest.raises(torch_training.TrainingError, match=r"loss is -?inf at step 1 \(epoch 0\)"):
        torch_training.fit(model, batches, loss, torch.optim.SGD(model.parameters(), lr=0.1),
                           log=None)


def test_device_cuda_missing_says_so():
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    with pytest.raises(torch_training.TrainingError, match="no CUDA device"):
        torch_training.device("cuda")
