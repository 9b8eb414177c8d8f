"""TrtOptimizer's settings, declared once: defaults and checks in one frozen object
that the component, the executor and the CLI all build (stored as JSON in one
execution parameter; the base, tfx_bridge.config, checks field types and
reads and writes the JSON). No TFX imports.

Example:
    >>> config = OptimizerConfig(iterations=30, time_budget_s=20.0,
    ...                          candidates=("frozen", "xla-cpu"))
    >>> OptimizerConfig.from_json(config.to_json()) == config
    True
    >>> OptimizerConfig(precision="fp8")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.components.trt_optimizer.errors.OptimizerConfigError: TrtOptimizer: ...
"""
from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple

from tfx_bridge.components.trt_optimizer.candidates import CPU_CANDIDATES
from tfx_bridge.components.trt_optimizer.errors import OptimizerConfigError
from tfx_bridge.components.trt_optimizer.results import (
    DEFAULT_ATOL,
    DEFAULT_ITERATIONS,
    DEFAULT_OP_DENYLIST,
    DEFAULT_TIME_BUDGET_S,
    PRECISIONS,
)
from tfx_bridge.config import Config

MIN_ITERATIONS = 10  # fewer timed calls give no p99
MAX_ITERATIONS = 100_000
# Seconds: below one the calibration alone uses it up; above an hour, a budget is not
# what limits the run.
MIN_TIME_BUDGET_S, MAX_TIME_BUDGET_S = 1.0, 3600.0


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(Config):
    """How a model is optimized and checked (docs/ARCHITECTURE.md, TrtOptimizer)."""

    COMPONENT = "TrtOptimizer"
    ERROR = OptimizerConfigError

    precision: str = "fp32"
    atol: float = DEFAULT_ATOL
    rtol: float = 0.0
    topk_threshold: float = 1.0
    iterations: int = DEFAULT_ITERATIONS  # the most timed calls per candidate and batch
    time_budget_s: float = DEFAULT_TIME_BUDGET_S  # the measuring phase's target duration
    op_denylist: Tuple[str, ...] = DEFAULT_OP_DENYLIST
    workspace_bytes: int = 1 << 30
    minimum_segment_size: int = 3
    maximum_cached_engines: int = 1
    fail_on_drift: bool = True
    candidates: Optional[Tuple[str, ...]] = None  # None: DEFAULT_CPU_CANDIDATES

    def problems(self) -> List[str]:
        problems = []
        if self.precision not in PRECISIONS:
            problems.append(f"precision {self.precision!r}: use one of {list(PRECISIONS)}")
        if not 0.0 < self.topk_threshold <= 1.0:
            problems.append(f"topk_threshold must be in (0, 1], got {self.topk_threshold}")
        if not (self.atol >= 0 and self.rtol >= 0 and math.isfinite(self.atol)
                and math.isfinite(self.rtol)):
            problems.append(f"atol and rtol must be finite and >= 0, got {self.atol} and "
                            f"{self.rtol}")
        if self.iterations < MIN_ITERATIONS:
            problems.append(f"iterations {self.iterations} is too few for a p99; use >= "
                            f"{MIN_ITERATIONS}")
        elif self.iterations > MAX_ITERATIONS:
            problems.append(f"iterations {self.iterations} is more than {MAX_ITERATIONS}; "
                            "time_budget_s bounds the measuring phase, use it instead")
        if not MIN_TIME_BUDGET_S <= self.time_budget_s <= MAX_TIME_BUDGET_S:
            problems.append(f"time_budget_s must be between {MIN_TIME_BUDGET_S:g} and "
                            f"{MAX_TIME_BUDGET_S:g} seconds, got {self.time_budget_s}")
        unknown = sorted(set(self.candidates or ()) - set(CPU_CANDIDATES))
        if unknown:
            problems.append(f"unknown candidates {unknown}; use some of {list(CPU_CANDIDATES)}")
        for name in ("workspace_bytes", "minimum_segment_size", "maximum_cached_engines"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        return problems

    def trt_options(self) -> dict:
        """TF-TRT's engine settings."""
        return {"workspace_bytes": self.workspace_bytes,
                "minimum_segment_size": self.minimum_segment_size,
                "maximum_cached_engines": self.maximum_cached_engines}
