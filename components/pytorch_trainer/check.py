"""What PyTorchTrainer checks after the user's ``run_fn``: the model it wrote
rebuilds from its spec and takes its own weights. No TFX imports."""
from __future__ import annotations

from typing import Dict, Tuple

from tfx_bridge import limits
from tfx_bridge.components.pytorch_trainer.errors import TrainerOutputError
from tfx_bridge.torch import model as torch_model


def check_trained(folder: str) -> Tuple[torch_model.ModelSpec, Dict[str, float]]:
    """The spec and metrics in ``folder``, once the module class named by the spec
    is built with its kwargs and loads the weights strictly (what the importer
    will do); any mismatch stops the trainer here, not in the importer."""
    if not torch_model.has_model(folder):
        raise TrainerOutputError(
            f"run_fn wrote no model to {folder}: end it with tfx_bridge.torch.model.save("
            "fn_args.serving_model_dir, model, spec).")
    try:
        spec = torch_model.read_spec(folder)
        metrics = torch_model.read_metrics(folder)
        state = torch_model.load_state_dict(folder)
    except torch_model.TorchModelError as e:
        raise TrainerOutputError(str(e)) from e
    try:
        cls = torch_model.import_module_class(spec.module_class)
    except torch_model.TorchModelError as e:
        raise TrainerOutputError(f"The model spec in {folder}: {e}") from e
    try:
        module = torch_model.build_module(cls, spec.module_kwargs,
                                          f"{spec.module_class}(**{spec.module_kwargs})")
        module.load_state_dict(state, strict=True)
    except limits.LimitError:
        raise
    except Exception as e:  # the user's class: any error means the spec does not rebuild it
        raise TrainerOutputError(
            f"The model spec in {folder} does not rebuild its weights: "
            f"{spec.module_class}(**{spec.module_kwargs}) then load_state_dict failed: "
            f"{' '.join(str(e).split()).rstrip('.')}. "
            "Save the spec with the class and kwargs the model was built with.") from e
    return spec, metrics
