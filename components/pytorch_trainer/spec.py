"""PyTorchTrainer's keys. Its ComponentSpec is TFX's own TrainerSpec, and it has no
settings of its own to gather into a config: ``run_fn``, ``train_args``,
``eval_args`` and ``custom_config`` are the stock Trainer's parameters (so
caching, module packaging and Kubeflow V2 compilation stay TFX's)."""
from __future__ import annotations

from tfx.types import standard_component_specs

MODEL_KEY = standard_component_specs.MODEL_KEY
BASE_MODEL_KEY = standard_component_specs.BASE_MODEL_KEY
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
# Custom properties on the trained Model (docs/ARCHITECTURE.md).
MODULE_CLASS_PROPERTY = "module_class"
WARM_START_PROPERTY = "warm_started_from"
RETRAINED_PROPERTY = "retrained"  # 1: run_fn trained; 0: the base model was re-emitted
