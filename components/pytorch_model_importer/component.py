"""PyTorchModelImporter: the TFX component (spec, class, build-time checks)."""
from __future__ import annotations

from typing import Optional, Sequence

from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel, standard_artifacts

from tfx_bridge.components.pytorch_model_importer import executor
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError
from tfx_bridge.components.pytorch_model_importer.spec import PyTorchModelImporterSpec

_DEFAULTS = ImporterConfig()


class PyTorchModelImporter(base_component.BaseComponent):
    """PyTorch (TorchScript, state_dict + class, or ONNX) -> a proven-equivalent SavedModel.

    Exports to ONNX (opset 17 by default, a dynamic axis per -1), converts with
    the importer's own ONNX -> TF converter (op by op in ONNX semantics, layouts
    kept: no silent NHWC; ``converter="onnx2tf"`` or ``"auto"`` for onnx2tf where
    ours refuses), wraps the result so ``serving_default`` has exactly the
    declared inputs and named outputs and
    ``serving_tf_example`` parses serialized tf.Examples (for Evaluator and
    InfraValidator), then runs torch, onnxruntime and the SavedModel on the
    same inputs at batch sizes 1, 7 and 32. Integer outputs must match exactly,
    floats within ``atol``, the SavedModel loaded in a fresh process with oneDNN
    off (TF Serving's stock CPU kernels). Fused PyTorch kernels and fixed-width
    EmbeddingBags are exported as standard ops, each named in the report; what
    cannot be converted is refused before the Model is written, naming the ONNX
    op, node, attribute or variant and PyTorch module.

    A ``source_model`` from PyTorchTrainer (its ``Format-PyTorch/`` holds the
    state_dict and a spec) needs no ``inputs``, ``output_names`` or
    ``module_class``: they come from the spec, declared once where the model
    is trained. With ``transform_graph``, the SavedModel serves raw features
    through the Transform graph (``serving_default`` takes them by name with
    raw dtypes, ``serving_tf_example`` raw tf.Examples); with ``examples``
    (raw) and ``transformed_examples`` too, PyTorch on Transform's
    materialised eval features is compared with the SavedModel on the same
    records raw: the training/serving skew check.

    Outputs:
      model: ``standard_artifacts.Model`` with ``Format-Serving/``,
        ``report.json``, ``report.md``, custom properties ``blessed`` (1/0),
        ``source``, ``max_abs_error`` (exact: a JSON-value property, see
        tfx_bridge.artifacts.properties; absent when nothing was measured), ``rewrites``,
        ``converter`` (the one that produced the served graph), ``source_digest``,
        ``tfx_version``.

    Example:
      >>> from tfx_bridge.components import PyTorchModelImporter
      >>> importer = PyTorchModelImporter(
      ...     source_kind="state_dict", source_path="/models/ctr/weights.pt",
      ...     module_class="tfx_bridge.pipelines.demo_models:TopKMoE",
      ...     inputs=["x:float32:-1,16"], output_names=["score", "experts"])
      >>> importer.outputs["model"].type_name
      'Model'
    """

    SPEC_CLASS = PyTorchModelImporterSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, source_kind: str = _DEFAULTS.source_kind,
                 inputs: Sequence[str] = _DEFAULTS.inputs,
                 output_names: Sequence[str] = _DEFAULTS.output_names,
                 source_path: Optional[str] = _DEFAULTS.source_path, source_model=None,
                 module_class: Optional[str] = _DEFAULTS.module_class,
                 module_kwargs: Optional[dict] = _DEFAULTS.module_kwargs,
                 schema=None, examples=None, transform_graph=None,
                 transformed_examples=None, opset: int = _DEFAULTS.opset,
                 atol: float = _DEFAULTS.atol, rtol: float = _DEFAULTS.rtol,
                 fail_on_not_equivalent: bool = _DEFAULTS.fail_on_not_equivalent,
                 converter: str = _DEFAULTS.converter,
                 graph_rewrites: bool = _DEFAULTS.graph_rewrites):
        """Builds the component; specs and names are checked now, files at run time.

        Args:
          source_kind: "torchscript", "state_dict" or "onnx".
          inputs: ``name:dtype:shape[:lo..hi]`` per model input, in order.
          output_names: the model's outputs, in order.
          source_path: the model file; relative to ``source_model``'s folder when
            that channel is given (e.g. an Importer of the research output).
          module_class / module_kwargs: ``pkg.mod:Class`` and its constructor
            kwargs, for state_dict sources.
          schema / examples: parse contract for the tf.Example signature, and
            real inputs for the equivalence check.
          converter: "auto" (default: ours, onnx2tf where ours refuses),
            "tfx-bridge" or "onnx2tf".
          graph_rewrites: rewrite the ONNX graph for onnx2tf (off only to see
            what the rewrites fix).
        """
        # Every check is the config's, at build time, as the CLI's and the executor's.
        config = ImporterConfig(
            source_kind=source_kind, source_path=source_path, module_class=module_class,
            module_kwargs=module_kwargs, inputs=inputs, output_names=output_names,
            opset=opset, atol=atol, rtol=rtol, fail_on_not_equivalent=fail_on_not_equivalent,
            converter=converter, graph_rewrites=graph_rewrites)
        problems = config.source_problems(has_source_model=source_model is not None)
        if transformed_examples is not None and transform_graph is None:
            problems.append("transformed_examples without transform_graph: give the "
                            "Transform's transform_graph too (the skew check compares the two)")
        if problems:
            raise ImporterConfigError("PyTorchModelImporter: " + "; ".join(problems) + ".")
        spec = PyTorchModelImporterSpec(
            config=config.to_json(), source_model=source_model, schema=schema,
            examples=examples, transform_graph=transform_graph,
            transformed_examples=transformed_examples,
            model=channel.Channel(type=standard_artifacts.Model))
        super().__init__(spec=spec)
