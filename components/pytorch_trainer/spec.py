"""PyTorchTrainer's keys. Its ComponentSpec is TFX's own TrainerSpec, and it has no
settings of its own to gather into a config: ``run_fn``, ``train_args``,
``eval_args`` and ``custom_config`` are the stock Trainer's parameters (so
caching, module packaging and Kubeflow V2 compilation stay TFX's)."""
from __future__ import annotations

from tfx.types import standard_component_specs

MODEL_KEY = standard_component_specs.MODEL_KEY
BASE_MODEL_KEY = standard_component_specs.BASE_MODEL_KEY
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
TRANSFORM_GRAPH_KEY = standard_component_specs.TRANSFORM_GRAPH_KEY
# Where the run_fn comes from: a dotted path, a module file, or TFX's packaged module.
RUN_FN_KEY = standard_component_specs.RUN_FN_KEY
MODULE_FILE_KEY = standard_component_specs.MODULE_FILE_KEY
MODULE_PATH_KEY = standard_component_specs.MODULE_PATH_KEY
# custom_config: the module file's own path as the pipeline was built (TFX runs a copy
# from the wheel it packages); errors name it. Taken out before the run_fn sees it.
MODULE_SOURCE_CONFIG = "tfx_bridge_module_file"
# Custom properties on the trained Model (docs/ARCHITECTURE.md).
MODULE_CLASS_PROPERTY = "module_class"
WARM_START_PROPERTY = "warm_started_from"
RETRAINED_PROPERTY = "retrained"  # 1: run_fn trained; 0: the base model was re-emitted
