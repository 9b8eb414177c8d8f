"""TrtOptimizer's constants and the records of a run: latencies, drift, one
candidate's result, the whole result."""
from __future__ import annotations

import dataclasses
from typing import List, Optional

from tfx_bridge.artifacts import layout, savedmodel

SERVING_DIR = savedmodel.SERVING_DIR
NOXLA_SIGNATURE = "serving_default_noxla"
# What a Transform-wrapped SavedModel exposes beside its signatures (docs/ARCHITECTURE.md).
TRANSFORM_WRAPPED_ATTRIBUTES = ("inner", "transform_raw", "transform_examples")
REPORT_JSON = layout.REPORT_JSON
REPORT_MD = layout.REPORT_MD
REPORT_PNG = "latency.png"
IMPORTER_REPORT = layout.REPORT_JSON
PRECISIONS = ("fp32", "fp16", "int8")
BACKEND_ORIGINAL = "original"
BACKEND_TENSORRT = "tensorrt"
DEFAULT_ATOL = 1e-4
# The most timed calls per candidate and batch size: a cap for small models, whose
# calls the budget would allow by the hundred thousand; the budget sizes the rest.
DEFAULT_ITERATIONS = 2000
# Seconds the measuring phase aims to take, all candidates and batch sizes together
# (calibration included); sized so a ResNet-50 at 224 on 2 cores is optimized in
# about 3 minutes, candidates built and drift-checked (docs/BENCHMARKS.md).
DEFAULT_TIME_BUDGET_S = 60.0
DEFAULT_BATCHES = (1, 32)
# A detector's batch sizes: its calls run image by image on full-size images (seconds
# each for an R-CNN), and clients send a few frames a request, not dozens.
DETECTION_BATCHES = (1, 4)
# CandidateResult.error of a candidate whose timing run did not finish.
NOT_TIMED = "not timed"
DEFAULT_OP_DENYLIST = ("TopKV2",)


@dataclasses.dataclass
class Built:
    """What every candidate builder returns: the TF Serving flags the folder it wrote
    needs, and notes for the report (rewrites applied)."""

    flags: List[str]
    notes: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Latency:
    """Timed calls of one servable at one batch size: p50/p99 over every call, and the
    median of each interleaved round (the figures the choice compares round by round)."""

    batch: int
    p50_ms: float
    p99_ms: float
    rounds_ms: List[float] = dataclasses.field(default_factory=list)
    calls: int = 0


@dataclasses.dataclass
class Speedup:
    """A candidate against the original at one batch size, round by round: ``ratio``
    is the median of the per-round ratios (candidate / original), ``low`` the
    smallest, ``bound`` the one-sided upper confidence bound on that median
    (``decide``); ``refused`` says which rule failed, None when it held."""

    batch: int
    ratio: float
    low: float
    bound: float
    rounds: int
    refused: Optional[str] = None


@dataclasses.dataclass
class Drift:
    output: str
    dtype: str
    max_abs: float
    max_rel: float
    mismatches: int
    topk_agreement: Optional[float]
    ok: bool
    # The largest |reference| of a float output (None for integer ones): an error
    # read against it tells float32 rounding on large outputs from a wrong graph.
    scale: Optional[float] = None
    # What changed in the output's contract (its shape or dtype, or the output gone),
    # None when only values differ.
    changed: Optional[str] = None


@dataclasses.dataclass
class CandidateResult:
    name: str
    backend: str
    serving_flags: List[str]
    latency: List[Latency] = dataclasses.field(default_factory=list)
    drift: List[Drift] = dataclasses.field(default_factory=list)
    error: Optional[str] = None
    notes: List[str] = dataclasses.field(default_factory=list)  # rewrites applied
    speedup: List[Speedup] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.error is None and all(d.ok for d in self.drift)


@dataclasses.dataclass
class OptimizeResult:
    blessed: bool
    backend: str
    precision: str
    requires_gpu: bool
    serving_flags: List[str]
    report: dict
