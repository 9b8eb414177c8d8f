"""PyTorchTrainer: the stock TFX Trainer, training a torch.nn.Module in the user's run_fn."""
from __future__ import annotations

from tfx import v1 as tfx
from tfx.dsl.components.base import executor_spec

from tfx_bridge.components.pytorch_trainer import executor


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
