"""The inputs TrtOptimizer times and checks with: the SavedModel's signature, and
representative feeds (random within the declared ranges, or real Examples)."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from tfx_bridge import limits
from tfx_bridge.artifacts import savedmodel
from tfx_bridge.components.trt_optimizer.errors import OptimizerConfigError
from tfx_bridge.components.trt_optimizer.results import (
    DEFAULT_BATCHES,
    DETECTION_BATCHES,
    IMPORTER_REPORT,
)
from tfx_bridge.storage import fs


def resolve_saved_model(path: str) -> str:
    """A SavedModel folder, or a Model artifact folder holding Format-Serving/."""
    return savedmodel.resolve_saved_model(path)


def importer_report(saved_model_dir: str) -> dict:
    """The importer's report.json beside Format-Serving, or {} without one."""
    report = fs.join(fs.dirname(saved_model_dir.rstrip("/")), IMPORTER_REPORT)
    if not fs.exists(report):
        return {}
    return limits.read_json(report, OptimizerConfigError,
                            "Give the importer's Model folder as it wrote it.")


def timing_batches(recorded: dict) -> Tuple[int, ...]:
    """The batch sizes to time and check at: DETECTION_BATCHES for a detector (the
    importer's report, :func:`importer_report`, has its ``detection`` section), else
    DEFAULT_BATCHES."""
    if isinstance(recorded.get("detection"), dict):
        return DETECTION_BATCHES
    return DEFAULT_BATCHES


def input_specs(fn, recorded: dict):
    """The serving inputs as importer TensorSpecs, with value ranges when the importer
    recorded them (``recorded``: its report, :func:`importer_report`), so random
    inputs stay valid,
    and the sizes of its ``representative_inputs`` where the signature leaves sizes
    open (a detector's images), so timings run on the model's workload."""
    from tfx_bridge.artifacts import tensorspec

    declared = {}
    for key in ("inputs", "representative_inputs"):
        for text in recorded.get(key) or []:
            spec = tensorspec.parse_input_spec(text)
            declared[spec.name] = spec
    specs = []
    for name, t in sorted(fn.structured_input_signature[1].items()):
        if name in declared:
            specs.append(declared[name])
            continue
        dims = tuple(-1 if d is None else int(d) for d in t.shape.as_list())
        if not dims or dims[0] != -1:
            dims = (-1,) + dims[1:] if dims else (-1,)
        specs.append(tensorspec.TensorSpec(name, t.dtype.name, dims))
    return specs


def representative_inputs(specs, batch: int, seed: int, examples_dir: Optional[str] = None,
                          held_out: bool = False) -> Dict[str, np.ndarray]:
    """From Examples when given (tiled to ``batch``), else random within range.

    The records read are split in two halves: timing inputs come from the
    first, ``held_out`` (drift-check) inputs from the second, so a candidate is
    never checked on the rows it was timed on (given at least two records).
    Random inputs differ by ``seed``.
    """
    from tfx_bridge.artifacts import examples, tensorspec

    if examples_dir:
        real = examples.inputs_from_examples(examples_dir, specs, 2 * max(batch, 32))
        if real:
            n = len(next(iter(real.values())))
            if n >= 2:
                half = n // 2
                real = {k: (v[half:] if held_out else v[:half]) for k, v in real.items()}
            tiled = examples.tile_rows(real, batch)
            if tiled is not None:
                return tiled
    return tensorspec.make_inputs(specs, batch, seed=seed)
