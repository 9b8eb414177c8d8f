"""PyTorchTrainer executor: TFX's generic Trainer executor around a PyTorch run_fn.

Everything TFX gives a ``run_fn`` is kept (train/eval files, transform output,
schema, train_args steps, custom_config, hyperparameters), with two changes:
``fn_args.serving_model_dir`` is the Model artifact's ``Format-PyTorch/``
(the run_fn saves there with :func:`tfx_bridge.torch.model.save`), and
``fn_args.base_model`` is the base model's ``Format-PyTorch/`` (None when
there is no base model, or it carries no PyTorch weights).
"""
from __future__ import annotations

from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.components.util import udf_utils
from tfx.types import artifact_utils

from tfx_bridge.artifacts import properties
from tfx_bridge.components.pytorch_trainer import check
from tfx_bridge.components.pytorch_trainer.errors import RunFnError
from tfx_bridge.components.pytorch_trainer.spec import (  # noqa: F401  (the keys: public)
    BASE_MODEL_KEY,
    EXAMPLES_KEY,
    MODEL_KEY,
    MODULE_CLASS_PROPERTY,
    RETRAINED_PROPERTY,
    WARM_START_PROPERTY,
)
from tfx_bridge.errors import BridgeError, describe_failure
from tfx_bridge.storage import fs
from tfx_bridge.torch import model as torch_model


class Executor(trainer_executor.GenericExecutor):
    """Runs the user's ``run_fn`` and checks the PyTorch model it saved."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        fn_args = self._GetFnArgs(input_dict, output_dict, exec_properties)
        model = artifact_utils.get_single_instance(output_dict[MODEL_KEY])
        fn_args.serving_model_dir = torch_model.folder_of(model.uri)
        fn_args.base_model = None
        if input_dict.get(BASE_MODEL_KEY):
            base = torch_model.folder_of(artifact_utils.get_single_uri(
                input_dict[BASE_MODEL_KEY]))
            if torch_model.has_model(base):
                fn_args.base_model = base
            else:
                # Said loudly: a retrain that silently starts from scratch would hide it.
                logging.warning("PyTorchTrainer: the base model has no %s (imported from "
                                "a hand-over without a spec?); training from scratch.",
                                base)
        examples = artifact_utils.get_single_uri(input_dict[EXAMPLES_KEY])
        retrained = 1
        if fn_args.base_model and torch_model.trained_on(fn_args.base_model) == examples:
            # A scheduled run over a span the served model was already trained on (the
            # rerun's base model changed from none to that model, so TFX cannot cache this
            # step): no new data, no new model. The base model is re-emitted as is.
            logging.info("PyTorchTrainer: %s was trained on these examples (%s); re-emitting "
                         "it instead of training on them again.", fn_args.base_model, examples)
            fs.copy_tree(fn_args.base_model, fn_args.serving_model_dir)
            retrained = 0
        else:
            where = exec_properties.get("run_fn") or exec_properties.get("module_file") or \
                exec_properties.get("module_path")
            try:
                run_fn = udf_utils.get_fn(exec_properties, "run_fn")
            except Exception as e:  # the user's module: any error is theirs to fix
                raise RunFnError(f"PyTorchTrainer: the run_fn {where} does not load: "
                                 f"{describe_failure(e)}.") from e
            logging.info("PyTorchTrainer: training (warm start from %s).", fn_args.base_model)
            try:
                run_fn(fn_args)
            except BridgeError:
                raise  # already says what and where (tfx_bridge.torch helpers)
            except Exception as e:  # the user's code: name it, not an internal error
                raise RunFnError(f"PyTorchTrainer: the run_fn {where} raised "
                                 f"{describe_failure(e)}.") from e
        spec, metrics = check.check_trained(fn_args.serving_model_dir)
        if retrained:
            torch_model.record_trained_on(fn_args.serving_model_dir, examples)
        model.set_int_custom_property(RETRAINED_PROPERTY, retrained)
        model.set_string_custom_property(MODULE_CLASS_PROPERTY, spec.module_class)
        if fn_args.base_model:
            model.set_string_custom_property(WARM_START_PROPERTY, fn_args.base_model)
        for name, value in metrics.items():
            properties.set_float(model, name, value)
        logging.info("PyTorchTrainer: %s saved to %s; metrics %s", spec.module_class,
                     fn_args.serving_model_dir, metrics)
