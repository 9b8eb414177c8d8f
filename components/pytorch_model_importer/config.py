"""PyTorchModelImporter's settings, declared once: defaults and checks in one frozen
object that the component, the executor and the CLI all build (stored as JSON in
one execution parameter). No TFX, torch or TF imports.

Example:
    >>> config = ImporterConfig(source_kind="torchscript", source_path="/m/model.pt",
    ...                         inputs=["x:float32:-1,16"], output_names=["score"])
    >>> ImporterConfig.from_json(config.to_json()) == config
    True
    >>> ImporterConfig(opset=9)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.components.pytorch_model_importer.errors.ImporterConfigError: ...
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

from tfx_bridge.components.pytorch_model_importer import detection, signature, source
from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError
from tfx_bridge.components.pytorch_model_importer.export.stage import (
    DEFAULT_OPSET,
    MAX_OPSET,
    MIN_OPSET,
)
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec
from tfx_bridge.components.pytorch_model_importer.source import (
    SOURCE_STATE_DICT,
    SOURCE_TORCHSCRIPT,
    SOURCES,
    ModelSource,
)
from tfx_bridge.components.pytorch_model_importer.to_tf import AUTO, CHOICES
from tfx_bridge.components.pytorch_model_importer.verify import DEFAULT_ATOL
from tfx_bridge.config import Config
from tfx_bridge.errors import BridgeError


@dataclasses.dataclass(frozen=True)
class ImporterConfig(Config):
    """What is imported and how it is checked (docs/ARCHITECTURE.md, the importer).

    ``inputs`` and ``output_names`` may stay empty when the source is a model
    folder with a ``Format-PyTorch/`` spec (PyTorchTrainer's): they come from
    the spec, declared once where the model is trained.
    """

    COMPONENT = "PyTorchModelImporter"
    ERROR = ImporterConfigError

    source_kind: str = SOURCE_STATE_DICT
    # The model file; relative to the source model folder when one is given.
    source_path: Optional[str] = None
    # pkg.mod:Class (or an allowed builder), for state_dict sources, and for a scripted
    # detector's TorchScript file: the module it is rebuilt from for its export.
    module_class: Optional[str] = None
    module_kwargs: Optional[dict] = None
    inputs: Tuple[str, ...] = ()  # name:dtype:shape[:lo..hi] per input, in order
    output_names: Tuple[str, ...] = ()
    opset: int = DEFAULT_OPSET
    atol: float = DEFAULT_ATOL
    rtol: float = 0.0
    fail_on_not_equivalent: bool = True
    converter: str = AUTO
    # Graph rewrites before onnx2tf (off only to see what they fix).
    graph_rewrites: bool = True
    # "tensors": the declared tensors in and out. "detection": torchvision's detection
    # interface in, the TF Object Detection API's signature out (detection.py); inputs
    # then declare the image batch (default images:uint8:-1,-1,-1,3) and outputs are
    # the API's.
    task: str = detection.TASK_TENSORS
    # A detector's detections per image when the model does not say (an ONNX file).
    max_detections: Optional[int] = None

    def problems(self) -> List[str]:
        problems = []
        if self.source_kind not in SOURCES:
            problems.append(f"source_kind {self.source_kind!r}: use one of {list(SOURCES)}")
        if not MIN_OPSET <= self.opset <= MAX_OPSET:
            problems.append(f"opset {self.opset}: use {MIN_OPSET} to {MAX_OPSET} "
                            f"(default {DEFAULT_OPSET})")
        if self.converter not in CHOICES:
            problems.append(f"converter {self.converter!r}: use one of {', '.join(CHOICES)}")
        if self.atol < 0 or self.rtol < 0:
            problems.append(f"atol and rtol must be >= 0, got {self.atol} and {self.rtol}")
        if self.task not in detection.TASKS:
            problems.append(f"task {self.task!r}: use one of {list(detection.TASKS)}")
        if self.max_detections is not None and (
                isinstance(self.max_detections, bool) or not isinstance(self.max_detections, int)
                or not 1 <= self.max_detections <= detection.MAX_DETECTIONS):
            problems.append(f"max_detections {self.max_detections!r}: use an integer from 1 "
                            f"to {detection.MAX_DETECTIONS}")
        if self.module_class and self.source_kind not in (SOURCE_STATE_DICT, SOURCE_TORCHSCRIPT):
            problems.append(f"module_class is for state_dict and TorchScript sources, not "
                            f"{self.source_kind}")
        if self.task == detection.TASK_DETECTION:
            problems += self._detection_problems()
            return problems
        if self.module_class and self.source_kind == SOURCE_TORCHSCRIPT:
            problems.append("module_class with a TorchScript source names the module a "
                            "scripted detector is rebuilt from (task='detection'); give "
                            "other TorchScript files alone, or a state_dict with module_class")
        for declared, check in ((self.inputs, signature.parse_input_specs),
                                (self.output_names, signature.check_output_names)):
            if declared:
                try:
                    check(declared)
                except BridgeError as e:  # a bad spec text, a bad or repeated name
                    problems.append(str(e).rstrip("."))
        return problems

    def _detection_problems(self) -> List[str]:
        problems = []
        if self.output_names:
            problems.append("a detector's outputs are the TF Object Detection API's "
                            f"({', '.join(detection.served_outputs(['masks', 'keypoints']))}, "
                            "as the model has them): leave output_names empty")
        if len(self.inputs) > 1:
            problems.append(f"a detector takes one batch of images; got inputs {list(self.inputs)}")
        elif self.inputs:
            try:
                detection.check_input(signature.parse_input_spec(self.inputs[0]))
            except BridgeError as e:
                problems.append(str(e).rstrip("."))
        return problems

    def source_problems(self, has_source_model: bool) -> List[str]:
        """What a build can tell about the source: a file or a model folder, and a
        state_dict's class unless a model folder's spec names it."""
        if self.source_path is None and not has_source_model:
            return ["give source_path, source_model, or both"]
        if has_source_model and not (self.inputs or self.output_names or self.module_class):
            return []  # everything comes from the source model's spec at run time
        problems = []
        if self.source_kind == SOURCE_STATE_DICT and not self.module_class:
            problems.append("a state_dict source needs module_class (pkg.mod:Class)")
        if self.task == detection.TASK_DETECTION:
            return problems  # the image batch has a default; the outputs are the API's
        if not self.inputs:
            problems.append("declare every model input as name:dtype:shape, in forward() order "
                            "(inputs)")
        if not self.output_names:
            problems.append("name every model output, in order (output_names)")
        return problems

    def resolve(self, folder: str = "") -> Tuple[ModelSource, List[TensorSpec], List[str]]:
        """(the source, parsed input specs, checked output names) of this import: from
        the model folder's ``Format-PyTorch/`` spec when ``folder`` holds one, else the
        declared ones (``source_path`` relative to ``folder`` when it is given). Both
        routes, the component's and ``tfx-bridge import-model``'s, resolve here."""
        if self.task == detection.TASK_DETECTION:  # outputs: the API's, once the model is read
            found = ModelSource(self.source_kind,
                                source.resolve_source_path(folder, self.source_path or ""),
                                self.module_class, self.module_kwargs or {})
            return found, [detection.check_input(signature.parse_input_spec(
                self.inputs[0] if self.inputs else detection.DEFAULT_INPUT))], []
        found, inputs, outputs = source.from_model_folder(
            folder, self.inputs, self.output_names, self.module_class, self.source_kind,
            self.source_path or "", self.module_kwargs or {})
        return found, signature.parse_input_specs(inputs), signature.check_output_names(outputs)

    @classmethod
    def of_source(cls, found: ModelSource, inputs: Sequence[str], output_names: Sequence[str],
                  **settings) -> ImporterConfig:
        """The config importing ``found`` (a model file, not a folder), for Python callers
        holding a ModelSource; ``settings`` are the other fields (``opset=18``)."""
        return cls(source_kind=found.kind, source_path=found.path,
                   module_class=found.module_class, module_kwargs=found.module_kwargs,
                   inputs=tuple(inputs), output_names=tuple(output_names), **settings)
