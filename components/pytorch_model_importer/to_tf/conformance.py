"""ONNX's own backend node tests (shipped in the onnx wheel) run through a converter.

No TFX imports. Each case is a folder ``onnx/backend/test/data/node/<case>/``
holding ``model.onnx`` and ``test_data_set_*/{input,output}_<i>.pb``.
:func:`run_case` converts the model, runs the converted function on the
case's inputs and compares with the expected outputs at ONNX's backend
tolerances (``rtol=1e-3``, ``atol=1e-7``, onnx/backend/test/runner).

This in-process form is for development; the benchmark
(``benchmarks/onnx_conformance.py``) saves SavedModels and checks them in a
fresh process with oneDNN off.
"""
from __future__ import annotations

import dataclasses
import glob
import os
from typing import List, Optional

import numpy as np

RTOL = 1e-3
ATOL = 1e-7
PASS, REFUSED, FAIL, MISMATCH = "pass", "refused", "fail", "mismatch"


def node_test_root() -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


def list_cases(prefix: str = "") -> List[str]:
    root = node_test_root()
    return sorted(d for d in os.listdir(root)
                  if d.startswith("test_" + prefix) and os.path.isdir(os.path.join(root, d)))


def _read_tensor(path: str):
    """A TensorProto file as numpy; None for sequences/optionals (not plain tensors)."""
    import onnx
    from onnx import numpy_helper
    data = open(path, "rb").read()
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    if tensor.data_type == 0:  # not a TensorProto: a SequenceProto or OptionalProto
        return None
    try:
        return numpy_helper.to_array(tensor)
    except ValueError:  # a SequenceProto that parsed as a TensorProto by accident
        return None


@dataclasses.dataclass
class Case:
    name: str
    model_path: str
    inputs: List[Optional[np.ndarray]]
    outputs: List[Optional[np.ndarray]]


def load_case(name: str, data_set: int = 0) -> Case:
    folder = os.path.join(node_test_root(), name)
    data = os.path.join(folder, f"test_data_set_{data_set}")

    def tensors(kind: str):
        files = sorted(glob.glob(os.path.join(data, f"{kind}_*.pb")),
                       key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))
        return [_read_tensor(p) for p in files]

    return Case(name, os.path.join(folder, "model.onnx"), tensors("input"), tensors("output"))


@dataclasses.dataclass
class CaseResult:
    name: str
    ops: List[str]
    status: str
    detail: str = ""


def compare_outputs(expected, got) -> Optional[str]:
    """None when ``got`` matches ``expected`` at ONNX's tolerances, else what differs."""
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        e, g = np.asarray(e), np.asarray(g)
        if e.shape != g.shape:
            return f"output {i}: shape {list(g.shape)}, expected {list(e.shape)}"
        if e.dtype != g.dtype:
            return f"output {i}: dtype {g.dtype}, expected {e.dtype}"
        if e.dtype.kind in "biuU" or e.dtype == object:
            if not np.array_equal(e, g):
                return f"output {i}: {int(np.sum(e != g))} values differ"
            continue
        try:
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL, equal_nan=True)
        except AssertionError:
            diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
            return f"output {i}: max abs diff {np.nanmax(diff):.3g}"
    return None


def case_ops(model) -> List[str]:
    from tfx_bridge.components.pytorch_model_importer.to_tf import core
    return sorted({n.op_type for n in core.iter_nodes(model.graph)})


def run_case(name: str) -> CaseResult:
    """Converts and runs one case in this process."""
    import onnx
    import tensorflow as tf

    from tfx_bridge.components.pytorch_model_importer.to_tf import core

    case = load_case(name)
    model = onnx.load(case.model_path)
    ops = case_ops(model)
    if any(v is None for v in case.inputs + case.outputs):
        return CaseResult(name, ops, REFUSED, "sequence or optional inputs/outputs")
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001  (inference is an aid)
        pass
    try:
        converted = core.convert(model)
    except core.ConversionFailed as e:
        return CaseResult(name, ops, REFUSED, str(e))
    except Exception as e:  # noqa: BLE001  (a converter crash is a finding, not a stop)
        return CaseResult(name, ops, FAIL, f"convert: {type(e).__name__}: {e}"[:500])
    graph_inputs = [i.name for i in model.graph.input
                    if i.name not in {t.name for t in model.graph.initializer}]
    feeds = [tf.constant(v) for _, v in zip(graph_inputs, case.inputs, strict=False)]
    try:
        out = converted.serve(*feeds)
        got = [out[n].numpy() for n in converted.output_names]
    except Exception as e:  # noqa: BLE001
        return CaseResult(name, ops, FAIL, f"run: {type(e).__name__}: {e}"[:500])
    problem = compare_outputs(case.outputs, got)
    return CaseResult(name, ops, MISMATCH if problem else PASS, problem or "")


def main(argv=None) -> None:
    """``python -m ...to_tf.conformance PREFIX...``: prints one line per case."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    counts = {}
    for prefix in args or [""]:
        for name in list_cases(prefix):
            r = run_case(name)
            counts[r.status] = counts.get(r.status, 0) + 1
            print(f"{r.status:8s} {name}  {r.detail[:300]}", flush=True)
    print(counts)


if __name__ == "__main__":
    main()
