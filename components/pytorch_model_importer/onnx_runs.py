"""Whether a graph no converter took runs in onnxruntime at all.

When every converter refuses a graph, the fault may be the graph's own: an ONNX
file whose export baked a size from its sample (an ``Expand`` to a shape the data
no longer fits, a ``Reshape`` to the sample's sequence) fails in onnxruntime too,
at the same node. The refusal then names that node and says the file is at
fault, with the fix for that cause (export it again, or hand over the weights),
instead of blaming the converter. No TFX imports.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec, make_inputs


def failure(onnx_path: str, inputs: Sequence[TensorSpec],
            describe: Callable[[str, str], str]) -> Optional[str]:
    """onnxruntime's error on ``onnx_path`` at batch 1 of the declared inputs, with the
    node it names (``describe(op, node)``); None when it runs (or onnxruntime is
    missing)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    from tfx_bridge.components.pytorch_model_importer.export.traced_batch import error_line
    from tfx_bridge.components.pytorch_model_importer.verify import ort_node, run_ort

    try:
        run_ort(onnx_path, make_inputs(inputs, 1))
    except Exception as e:  # noqa: BLE001  (the file's own failure is the answer)
        if "NOT_IMPLEMENTED" in str(e):
            return None  # an onnxruntime kernel missing: says nothing about the file
        op, node = ort_node(str(e))
        where = f" at {describe(op, node)}" if node else ""
        return f"{where}: {error_line(e)}"
    return None


def message(source_kind: str, failed: str, refusal: str) -> str:
    """The refusal for a graph onnxruntime cannot run either (``failed`` from
    :func:`failure`), by hand-over form; ``refusal``: the converters' own words."""
    if source_kind == "onnx":
        what = "The ONNX file handed over does not run in onnxruntime either"
        fix = ("the file itself is broken for inputs of the declared shapes (its export "
               "fixed a size from its sample input): export it again with those axes "
               "dynamic, or hand over the state_dict or TorchScript so the importer "
               "exports it")
    else:
        what = "torch's ONNX export of the model does not run in onnxruntime either"
        fix = ("torch's exporter wrote a graph that is wrong for inputs of the declared "
               "shapes (a size fixed from the export's sample): declare fixed sizes for "
               "the axes the model's code sizes from, or export the model yourself and "
               "hand over the file")
    return (f"{what}{failed}. Cause and fix: {fix}. (The converters' own refusal: "
            f"{refusal[:600]})")
