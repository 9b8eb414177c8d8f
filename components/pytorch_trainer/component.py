"""PyTorchTrainer: the stock TFX Trainer, training a torch.nn.Module in the user's run_fn."""
from __future__ import annotations

import os

from tfx import v1 as tfx
from tfx.dsl.components.base import executor_spec

from tfx_bridge.components.pytorch_trainer import executor
from tfx_bridge.components.pytorch_trainer.spec import MODULE_SOURCE_CONFIG
from tfx_bridge.storage import fs


class PyTorchTrainer(tfx.components.Trainer):
    """TFX's Trainer (same spec, inputs, caching, lineage, module packaging and
    KubeflowV2 compilation) whose executor runs a PyTorch ``run_fn(fn_args)``.

    The run_fn reads ``fn_args.train_files`` / ``eval_files`` (Transform's
    materialised examples) with :mod:`tfx_bridge.torch.examples`, trains with
    :mod:`tfx_bridge.torch.training`, warm-starts from ``fn_args.base_model``
    when it is set (:func:`tfx_bridge.torch.model.warm_start`), and saves with
    :func:`tfx_bridge.torch.model.save` to ``fn_args.serving_model_dir``
    (the Model's ``Format-PyTorch/``): the state_dict and the spec that
    PyTorchModelImporter reads. Metrics the run_fn saves become exact float
    custom properties of the Model. After the run_fn, the executor rebuilds
    the module from the spec and loads the weights strictly.

    Example:
      >>> from tfx_bridge.components import PyTorchTrainer
      >>> trainer = PyTorchTrainer(
      ...     examples=transform.outputs["transformed_examples"],   # doctest: +SKIP
      ...     transform_graph=transform.outputs["transform_graph"],
      ...     run_fn="tfx_bridge.pipelines.demo_trainer.run_fn",
      ...     train_args=tfx.proto.TrainArgs(num_steps=200),
      ...     eval_args=tfx.proto.EvalArgs(num_steps=None))
    """

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, *args, module_file=None, custom_config=None, **kwargs):
        # TFX packages a module file into a wheel and every process runs a copy of it:
        # its own path travels in custom_config, so an error names the user's file.
        if isinstance(module_file, str) and module_file and (
                custom_config is None or isinstance(custom_config, dict)):
            source = module_file if fs.is_remote(module_file) else os.path.abspath(module_file)
            custom_config = {**(custom_config or {}), MODULE_SOURCE_CONFIG: source}
        super().__init__(*args, module_file=module_file, custom_config=custom_config, **kwargs)
