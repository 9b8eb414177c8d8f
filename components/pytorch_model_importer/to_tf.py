"""The ONNX -> TF stage: which converter turns the exported ONNX into a SavedModel, and
the one entry point.

- ``tfx-bridge`` (the ``tfx_bridge.onnx_tf`` package): ONNX semantics op by op, ONNX's
  layout kept, TF's stock CPU kernels; every unsupported op or variant refused
  by name before anything is written.
- ``onnx2tf`` (onnx2tf/): onnx2tf 1.24.1 with the graph rewrites it
  needs; NHWC-first, so its layout heuristics can break inside transformer and
  vision graphs.
- ``auto`` (the default): ours; onnx2tf only for a graph ours refuses (the
  refusal and onnx2tf's outcome are both kept in the report). Whichever ran,
  the importer's equivalence check decides the blessing.

No TFX imports; TF and onnx are imported lazily.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, List, Optional, Sequence

from tfx_bridge.components.pytorch_model_importer import rewrite
from tfx_bridge.components.pytorch_model_importer.errors import (
    ConversionError,
    ImporterConfigError,
)
from tfx_bridge.components.pytorch_model_importer.onnx2tf import convert as onnx2tf
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec

OURS = "tfx-bridge"
ONNX2TF = onnx2tf.NAME
AUTO = "auto"
CHOICES = (AUTO, OURS, ONNX2TF)
MAX_PROBLEMS_SHOWN = 8


@dataclasses.dataclass
class Converted:
    # A SavedModel folder (onnx2tf), or our converter's in-memory graph (core.Converted),
    # which wrap.py saves once with the declared signatures.
    saved_model: Any
    converter: str
    rewrites: List[rewrite.Rewrite]
    # Every converter tried, in order: {"converter", "outcome", "message", "seconds"}.
    attempts: List[dict]


def check_choice(converter: str) -> str:
    if converter not in CHOICES:
        raise ImporterConfigError(f"converter {converter!r}: use one of {', '.join(CHOICES)}.")
    return converter


def refusal_message(problems, types: Dict[str, str]) -> str:
    """One message naming every refused node: op type, node, variant, shapes, module, fix."""
    shown = [p.describe(rewrite.scope_of(p.node, types)) for p in problems[:MAX_PROBLEMS_SHOWN]]
    more = len(problems) - len(shown)
    return ("The tfx-bridge converter cannot convert this model; nothing was written. "
            + "; ".join(shown) + (f"; and {more} more node(s)" if more > 0 else "") + ".")


def faithful_graph(onnx_path: str, inputs: Sequence[TensorSpec],
                   types: Optional[Dict[str, str]] = None):
    """Our converter, in memory (core.Converted); ConversionError naming every refused
    node."""
    from tfx_bridge.onnx_tf import core

    model = core.load_for_conversion(onnx_path)
    dynamic = {s.name: [None if d < 0 else d for d in s.shape] for s in inputs}
    try:
        return core.convert(model, dynamic)
    except core.ConversionFailed as e:
        raise ConversionError(refusal_message(e.problems, types or {})) from None


def faithful(onnx_path: str, out_dir: str, inputs: Sequence[TensorSpec],
             types: Optional[Dict[str, str]] = None) -> str:
    """Our converter into the SavedModel folder ``out_dir`` (ONNX input/output names)."""
    from tfx_bridge.onnx_tf import core

    core.save(faithful_graph(onnx_path, inputs, types), out_dir)
    return out_dir


def to_saved_model(onnx_path: str, workdir: str, inputs: Sequence[TensorSpec],
                   types: Optional[Dict[str, str]] = None, converter: str = AUTO,
                   graph_rewrites: bool = True) -> Converted:
    """Converts ``onnx_path`` with the chosen converter(s); raises ConversionError (naming
    op, node, variant and module) when none converts."""
    check_choice(converter)
    attempts: List[dict] = []
    if converter in (AUTO, OURS):
        start = time.perf_counter()
        try:
            out = faithful_graph(onnx_path, inputs, types)
            attempts.append({"converter": OURS, "outcome": "converted", "message": None,
                             "seconds": round(time.perf_counter() - start, 2)})
            return Converted(out, OURS, [], attempts)
        except ConversionError as e:
            attempts.append({"converter": OURS, "outcome": "refused", "message": str(e),
                             "seconds": round(time.perf_counter() - start, 2)})
            if converter == OURS or not onnx2tf.available():
                raise
            ours_refusal = e
    start = time.perf_counter()
    try:
        out, rewrites = onnx2tf.convert(onnx_path, workdir, inputs, types, graph_rewrites)
    except ConversionError as e:
        if converter == ONNX2TF:
            raise
        raise ConversionError(f"{ours_refusal} onnx2tf, tried next, failed too: {e}") from None
    attempts.append({"converter": ONNX2TF, "outcome": "converted", "message": None,
                     "seconds": round(time.perf_counter() - start, 2)})
    return Converted(out, ONNX2TF, rewrites, attempts)
