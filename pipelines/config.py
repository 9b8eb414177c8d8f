"""A pipeline run's settings, declared once: defaults and checks in one frozen object
that ``tfx-bridge run``, ``demo`` and ``compile-kfp``, :func:`create_pipeline`,
the local runner and the Kubeflow compile all build (the base, tfx_bridge.config,
checks field types). The CLI's option defaults are these defaults. Where the data,
artifacts and served models live (paths and URIs) is not a setting: those are the
run's inputs, given beside the config. No TFX imports, so the CLI checks its
flags before the slow imports.

Example:
    >>> config = PipelineConfig(train_steps=30, evaluate=False)
    >>> (config.model_name, config.train_steps, config.optimizer_iterations)
    ('ctr', 30, 2000)
    >>> config.updated(model_name="ctr_v2").model_name
    'ctr_v2'
    >>> PipelineConfig(train_steps=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.pipelines.config.PipelineConfigError: pipeline: train_steps must be >= 1, ...
"""
from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple

from tfx_bridge.components.trt_optimizer.results import DEFAULT_ITERATIONS
from tfx_bridge.config import Config
from tfx_bridge.errors import BridgeError

# The demo's generated data (tfx-bridge demo): span folders 1..DEMO_SPANS.
DEMO_SPANS = 2
DEMO_ROWS_PER_SPAN = 3000


class PipelineConfigError(BridgeError):
    """A pipeline setting that cannot work; the message names it and the fix. A retry
    with the same settings fails the same way."""


@dataclasses.dataclass(frozen=True)
class PipelineConfig(Config):
    """How one pipeline run trains, converts, optimizes, gates and pushes
    (docs/ARCHITECTURE.md, CLI)."""

    COMPONENT = "pipeline"
    ERROR = PipelineConfigError

    # The served model's name under the serving base path.
    model_name: str = "ctr"
    # Train in the pipeline: Transform's preprocessing_fn and PyTorchTrainer's run_fn
    # (a dotted path or a .py module file); hand-over mode may name the first only.
    preprocessing_module: Optional[str] = None
    trainer_module: Optional[str] = None
    train_steps: int = 150
    # PyTorchTrainer's custom_config (e.g. {"num_workers": 2}).
    custom_config: Optional[dict] = None
    # Hand-over mode: the research folder's weights file and how the model is declared
    # (empty inputs/outputs: the demo model's).
    module_class: str = "tfx_bridge.pipelines.demo_models:CtrMoE"
    model_file: str = "weights.pt"
    inputs: Tuple[str, ...] = ()
    output_names: Tuple[str, ...] = ()
    # The Evaluator gate: AUC above the floor, not worse than the latest blessed model.
    evaluate: bool = True
    auc_floor: float = 0.5
    # TrtOptimizer's timed calls per candidate and batch size, and its CPU candidates
    # (None: those stock TF Serving serves without experimental flags).
    optimizer_iterations: int = DEFAULT_ITERATIONS  # the optimizer's own default
    optimizer_candidates: Optional[Tuple[str, ...]] = None
    # Transform's own pre/post-transform statistics (two more passes over the data).
    transform_statistics: bool = False
    enable_cache: bool = True
    # Seconds a run waits for another run of its workdir or served model before it is
    # refused as busy (0: at once).
    lock_timeout_s: float = 0.0

    def problems(self) -> List[str]:
        problems = []
        for name in ("train_steps", "optimizer_iterations"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.auc_floor <= 1.0:
            problems.append(f"auc_floor must be in [0, 1] (an AUC), got {self.auc_floor}")
        if not (math.isfinite(self.lock_timeout_s) and self.lock_timeout_s >= 0):
            problems.append(f"lock_timeout_s must be a number of seconds >= 0, got "
                            f"{self.lock_timeout_s}")
        if not self.model_file:
            problems.append("model_file must name the weights file in the research folder "
                            "(e.g. 'weights.pt')")
        return problems

    def updated(self, **settings) -> PipelineConfig:
        """This config with ``settings`` (field names) replaced, checked again."""
        fields = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(settings) - set(fields))
        if unknown:
            raise PipelineConfigError(f"{self.COMPONENT}: unknown settings {unknown}; use "
                                      f"some of {fields}.")
        return dataclasses.replace(self, **settings) if settings else self
