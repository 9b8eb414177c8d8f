"""PyTorchTrainer executor: TFX's generic Trainer executor around a PyTorch run_fn.

Everything TFX gives a ``run_fn`` is kept (train/eval files, transform output,
schema, train_args steps, custom_config, hyperparameters), with two changes:
``fn_args.serving_model_dir`` is the Model artifact's ``Format-PyTorch/``
(the run_fn saves there with :func:`tfx_bridge.torch.model.save`), and
``fn_args.base_model`` is the base model's ``Format-PyTorch/`` (None when
there is no base model, or it carries no PyTorch weights).
"""
from __future__ import annotations

import contextlib
import json
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.components.util import udf_utils
from tfx.types import artifact_utils

from tfx_bridge import envvars
from tfx_bridge.artifacts import properties
from tfx_bridge.components.pytorch_trainer import check
from tfx_bridge.components.pytorch_trainer.errors import RunFnError
from tfx_bridge.components.pytorch_trainer.spec import (
    BASE_MODEL_KEY,
    EXAMPLES_KEY,
    MODEL_KEY,
    MODULE_CLASS_PROPERTY,
    MODULE_FILE_KEY,
    MODULE_PATH_KEY,
    MODULE_SOURCE_CONFIG,
    RETRAINED_PROPERTY,
    RUN_FN_KEY,
    TRANSFORM_GRAPH_KEY,
    WARM_START_PROPERTY,
)
from tfx_bridge.errors import USER_SOURCES_ENV, BridgeError, describe_failure
from tfx_bridge.storage import fs
from tfx_bridge.torch import distributed
from tfx_bridge.torch import model as torch_model
from tfx_bridge.torch.decode import PIPELINE_EXAMPLES_ENV


def training_recipe(run_fn, exec_properties: Dict[str, Any],
                    input_dict: Dict[str, List[types.Artifact]]) -> str:
    """A digest of everything besides the examples that shapes the trained model: the
    run_fn's source file, its name, train/eval args, custom_config and the transform
    graph. A change to any of them trains again on an unchanged span."""
    import hashlib
    import inspect

    try:
        source = fs.read_bytes(inspect.getsourcefile(run_fn) or "")
    except (TypeError, OSError, BridgeError):  # a builtin or a vanished file: the name
        source = b""
    graph = input_dict.get(TRANSFORM_GRAPH_KEY)
    parts = [source, getattr(run_fn, "__qualname__", "").encode()]
    parts += [str(exec_properties.get(k)).encode()
              for k in ("train_args", "eval_args", MODULE_PATH_KEY)]
    # Where the module file lay when the pipeline was built is not part of the recipe.
    config = dict(_custom_config(exec_properties))
    config.pop(MODULE_SOURCE_CONFIG, None)
    parts.append(json.dumps(config, sort_keys=True, default=str).encode())
    parts.append((artifact_utils.get_single_uri(graph) if graph else "").encode())
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def _custom_config(exec_properties: Dict[str, Any]) -> Dict[str, Any]:
    raw = exec_properties.get("custom_config")
    try:
        found = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {"": raw}
    return found if isinstance(found, dict) else {"": found}


def _user_sources(exec_properties: Dict[str, Any]):
    """The run_fn module file's own path, for errors raised in its copies
    (:data:`tfx_bridge.errors.USER_SOURCES_ENV`); None without one."""
    source = _custom_config(exec_properties).get(MODULE_SOURCE_CONFIG) or \
        exec_properties.get(MODULE_FILE_KEY)
    if not isinstance(source, str) or not source:
        return None
    return json.dumps({fs.basename(source): source})


NUM_WORKERS_KEY = "num_workers"  # custom_config: processes training under torch.distributed


def num_workers(custom_config) -> int:
    """``custom_config["num_workers"]`` (default 1), a positive int or refused."""
    value = (custom_config or {}).get(NUM_WORKERS_KEY, 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RunFnError(f"PyTorchTrainer: custom_config {NUM_WORKERS_KEY}={value!r}: give "
                         "a whole number of processes, 1 or more.")
    return value


def _fields(fn_args) -> Dict[str, Any]:
    """FnArgs' plain fields, to rebuild it in a rank (the data accessor holds TFX
    objects a fresh process cannot take; a run_fn here reads files itself)."""
    import attr

    return {k: v for k, v in attr.asdict(fn_args, recurse=False).items()
            if k != "data_accessor"}


def _plain(exec_properties: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in exec_properties.items()
            if v is None or isinstance(v, (str, int, float, bool))}


def _rank_fn(run_fn, exec_properties: Dict[str, Any]):
    """What a rank calls: the run_fn itself when a fresh interpreter can import it by
    name (an installed module, or the user wheel TFX put on sys.path, which the ranks
    inherit), else the exec properties to load it from as this executor did."""
    import importlib.machinery
    import pickle
    import sys

    if exec_properties.get(MODULE_FILE_KEY) or exec_properties.get(MODULE_PATH_KEY):
        # TFX loaded it from a file or its own wheel (then took the wheel off sys.path):
        # a fresh interpreter loads it the same way.
        return _plain(exec_properties)
    try:
        top = (run_fn.__module__ or "").split(".")[0]
        # Found on the path, not only in this process's sys.modules.
        if top and importlib.machinery.PathFinder.find_spec(top, sys.path) is not None:
            pickle.dumps(run_fn)
            return run_fn
    except Exception:  # noqa: BLE001  (not importable by name: loaded from its source)
        pass
    return _plain(exec_properties)


def _train(run_fn, fn_args, exec_properties: Dict[str, Any], workers: int) -> None:
    if workers > 1:
        distributed.run(train_rank, (_rank_fn(run_fn, exec_properties), _fields(fn_args)),
                        nprocs=workers,
                        which=(fn_args.custom_config or {}).get("distributed_backend"))
    else:
        run_fn(fn_args)


@contextlib.contextmanager
def _pipeline_examples(examples: List[types.Artifact]):
    """The run_fn (and its ranks, which inherit the environment) reads these
    Examples with TF's reader: the pipeline's components wrote them
    (docs/guides/reader.md)."""
    with envvars.scoped(PIPELINE_EXAMPLES_ENV, json.dumps([a.uri for a in examples])):
        yield


def train_rank(run_fn, fields: Dict[str, Any]) -> None:
    """One rank of a distributed training: the run_fn (or the exec properties to load
    it from) called with the same FnArgs; the process group is initialised."""
    from tfx.components.trainer.fn_args_utils import FnArgs

    if isinstance(run_fn, dict):
        if any("s3://" in str(v) for v in run_fn.values()):
            from tfx_bridge.storage import objectstore

            objectstore.enable_tfio()  # the user wheel may live under an s3 pipeline root
        run_fn = udf_utils.get_fn(run_fn, RUN_FN_KEY)
    run_fn(FnArgs(**fields))


class Executor(trainer_executor.GenericExecutor):
    """Runs the user's ``run_fn`` and checks the PyTorch model it saved."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        fn_args = self._GetFnArgs(input_dict, output_dict, exec_properties)
        if isinstance(fn_args.custom_config, dict):  # the run_fn's settings only
            fn_args.custom_config.pop(MODULE_SOURCE_CONFIG, None)
        with envvars.scoped(USER_SOURCES_ENV, _user_sources(exec_properties)):
            self._train_and_check(fn_args, input_dict, output_dict, exec_properties)

    def _train_and_check(self, fn_args, input_dict: Dict[str, List[types.Artifact]],
                         output_dict: Dict[str, List[types.Artifact]],
                         exec_properties: Dict[str, Any]) -> None:
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
        # The run_fn loads every run, also when the model is re-emitted: a typo surfaces
        # now, not on the next new span.
        where = exec_properties.get(RUN_FN_KEY) or exec_properties.get(MODULE_FILE_KEY) or \
            _custom_config(exec_properties).get(MODULE_SOURCE_CONFIG) or \
            exec_properties.get(MODULE_PATH_KEY)
        try:
            run_fn = udf_utils.get_fn(exec_properties, RUN_FN_KEY)
        except Exception as e:  # the user's module: any error is theirs to fix
            raise RunFnError(f"PyTorchTrainer: the run_fn {where} does not load: "
                             f"{describe_failure(e)}.") from e
        recipe = training_recipe(run_fn, exec_properties, input_dict)
        retrained = 1
        if fn_args.base_model and torch_model.trained_on(fn_args.base_model) == examples \
                and torch_model.trained_recipe(fn_args.base_model) == recipe:
            # A scheduled run over a span the served model was already trained on, by the
            # same run_fn, settings and transform graph (the rerun's base model changed
            # from none to that model, so TFX cannot cache this step): no new model.
            logging.info("PyTorchTrainer: %s was trained on these examples (%s) the same "
                         "way; re-emitting it instead of training again.", fn_args.base_model,
                         examples)
            fs.copy_tree(fn_args.base_model, fn_args.serving_model_dir)
            retrained = 0
        else:
            workers = num_workers(fn_args.custom_config)
            logging.info("PyTorchTrainer: training on %d process(es) (warm start from %s).",
                         workers, fn_args.base_model)
            try:
                with _pipeline_examples(input_dict[EXAMPLES_KEY]):
                    _train(run_fn, fn_args, exec_properties, workers)
            except distributed.DistributedRunError as e:
                raise RunFnError(f"PyTorchTrainer: the run_fn {where}: {e}") from e
            except BridgeError:
                raise  # already says what and where (tfx_bridge.torch helpers)
            except Exception as e:  # the user's code: name it, not an internal error
                raise RunFnError(f"PyTorchTrainer: the run_fn {where} raised "
                                 f"{describe_failure(e)}.") from e
        spec, metrics = check.check_trained(fn_args.serving_model_dir)
        if retrained:
            torch_model.record_trained_on(fn_args.serving_model_dir, examples, recipe)
        model.set_int_custom_property(RETRAINED_PROPERTY, retrained)
        model.set_string_custom_property(MODULE_CLASS_PROPERTY, spec.module_class)
        if fn_args.base_model:
            model.set_string_custom_property(WARM_START_PROPERTY, fn_args.base_model)
        for name, value in metrics.items():
            properties.set_float(model, name, value)
        logging.info("PyTorchTrainer: %s saved to %s; metrics %s", spec.module_class,
                     fn_args.serving_model_dir, metrics)
