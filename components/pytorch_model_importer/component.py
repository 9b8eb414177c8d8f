"""PyTorchModelImporter: the TFX component (spec, class, build-time checks)."""
from __future__ import annotations

import json
from typing import Optional, Sequence

from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel, component_spec, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_bridge.components.pytorch_model_importer import convert, executor, signature
from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError

SOURCE_MODEL_KEY = executor.SOURCE_MODEL_KEY
SCHEMA_KEY = executor.SCHEMA_KEY
EXAMPLES_KEY = executor.EXAMPLES_KEY
TRANSFORM_GRAPH_KEY = executor.TRANSFORM_GRAPH_KEY
TRANSFORMED_EXAMPLES_KEY = executor.TRANSFORMED_EXAMPLES_KEY
MODEL_KEY = executor.MODEL_KEY
BLESSED_PROPERTY = executor.BLESSED_PROPERTY


class PyTorchModelImporterSpec(component_spec.ComponentSpec):
    """A model file (+ optional Schema, Examples) -> Model (Format-Serving)."""

    PARAMETERS = {
        executor.SOURCE_KIND_KEY: ExecutionParameter(type=str),
        executor.SOURCE_PATH_KEY: ExecutionParameter(type=str, optional=True),
        executor.MODULE_CLASS_KEY: ExecutionParameter(type=str, optional=True),
        executor.MODULE_KWARGS_KEY: ExecutionParameter(type=str, optional=True),
        executor.INPUTS_KEY: ExecutionParameter(type=str),
        executor.OUTPUT_NAMES_KEY: ExecutionParameter(type=str),
        executor.OPSET_KEY: ExecutionParameter(type=int, optional=True),
        executor.ATOL_KEY: ExecutionParameter(type=float, optional=True),
        executor.RTOL_KEY: ExecutionParameter(type=float, optional=True),
        executor.FAIL_ON_NOT_EQUIVALENT_KEY: ExecutionParameter(type=int, optional=True),
        executor.CONVERTER_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        SOURCE_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
        SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema, optional=True),
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
        TRANSFORM_GRAPH_KEY: ChannelParameter(type=standard_artifacts.TransformGraph,
                                              optional=True),
        TRANSFORMED_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples,
                                                   optional=True),
    }
    OUTPUTS = {MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}


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

    def __init__(self, source_kind: str = convert.SOURCE_STATE_DICT,
                 inputs: Sequence[str] = (), output_names: Sequence[str] = (),
                 source_path: Optional[str] = None, source_model=None,
                 module_class: Optional[str] = None, module_kwargs: Optional[dict] = None,
                 schema=None, examples=None, transform_graph=None,
                 transformed_examples=None, opset: int = convert.DEFAULT_OPSET,
                 atol: float = convert.DEFAULT_ATOL, rtol: float = 0.0,
                 fail_on_not_equivalent: bool = True,
                 converter: str = convert.DEFAULT_CONVERTER):
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
        """
        if source_kind not in convert.SOURCES:
            raise ImporterConfigError(
                f"source_kind {source_kind!r}: use one of {convert.SOURCES}.")
        if source_path is None and source_model is None:
            raise ImporterConfigError("Give source_path, source_model, or both.")
        from_spec = source_model is not None and not (inputs or output_names or module_class)
        if source_kind == convert.SOURCE_STATE_DICT and not module_class and not from_spec:
            raise ImporterConfigError("A state_dict source needs module_class (pkg.mod:Class).")
        if transformed_examples is not None and transform_graph is None:
            raise ImporterConfigError(
                "transformed_examples without transform_graph: give the Transform's "
                "transform_graph too (the skew check compares the two).")
        if not convert.MIN_OPSET <= opset <= 20:
            raise ImporterConfigError(f"opset {opset}: use {convert.MIN_OPSET} to 20.")
        if converter not in convert.CONVERTERS:
            raise ImporterConfigError(
                f"converter {converter!r}: use one of {', '.join(convert.CONVERTERS)}.")
        # Taken from the source model's spec at run time when none is declared.
        specs = signature.parse_input_specs(list(inputs)) if not from_spec else []
        names = signature.check_output_names(list(output_names)) if not from_spec else []
        spec = PyTorchModelImporterSpec(
            source_kind=source_kind, source_path=source_path, module_class=module_class,
            module_kwargs=None if module_kwargs is None else json.dumps(module_kwargs),
            inputs=json.dumps([s.to_text() for s in specs]), output_names=json.dumps(names),
            opset=opset, atol=float(atol), rtol=float(rtol),
            fail_on_not_equivalent=int(bool(fail_on_not_equivalent)), converter=converter,
            source_model=source_model, schema=schema, examples=examples,
            transform_graph=transform_graph, transformed_examples=transformed_examples,
            model=channel.Channel(type=standard_artifacts.Model))
        super().__init__(spec=spec)
