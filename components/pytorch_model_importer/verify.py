"""Import stage 5: proof of equivalence.

The SavedModel is loaded in a separate process that never built it, with
oneDNN off and no GPU (``verify_child.py``, ``child.SERVING_CPU_ENV``): stock TF
Serving CPU builds run TF's own kernels, where an NCHW Conv2D fails, so a graph
that works only with oneDNN is not equivalent. The process is a warm worker
(``tfx_bridge.child``, TensorFlow imported once and reused across imports, as
TF Serving loads many models); a crash or hang there is a failed check. It
runs on the same inputs as torch (for torch sources) and onnxruntime at batch
sizes 1, 7 and 32; per output max abs / rel error; integer outputs must match
exactly. The tf.Example signature is checked against ``serving_default`` too. No TFX imports.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfx_bridge import child
from tfx_bridge.artifacts import compare, examples
from tfx_bridge.artifacts.savedmodel import SERVING_SIGNATURE
from tfx_bridge.components.pytorch_model_importer.errors import missing_extra
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec, make_inputs
from tfx_bridge.components.pytorch_model_importer.source import lazy_torch
from tfx_bridge.errors import short_message

DEFAULT_ATOL = 1e-4
DEFAULT_BATCH_SIZES = (1, 7, 32)
VIA_EXAMPLES = SERVING_SIGNATURE + " via tf.Example"
VERIFY_TIMEOUT_S = 900
CHILD_MODULE = "tfx_bridge.components.pytorch_model_importer.verify_child"
CHILD_MARKER = "TFX_BRIDGE_VERIFY "


@dataclasses.dataclass
class OutputCheck:
    """One comparison; ``error`` (and None for the numbers) when a side raised instead."""

    batch: int
    output: str
    reference: str
    dtype: str
    max_abs: Optional[float]
    max_rel: Optional[float]
    mismatches: Optional[int]
    ok: bool
    error: Optional[str] = None
    # The reference's largest finite |value| (float outputs): what max_abs is read against.
    scale: Optional[float] = None


def _flatten_outputs(out) -> List:
    """A model's outputs as a flat list (tuples/lists nested as nn.LSTM returns them)."""
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in _flatten_outputs(item)]
    return [out]


def run_torch(module, feeds: Dict[str, np.ndarray], inputs: Sequence[TensorSpec]
              ) -> List[np.ndarray]:
    torch = lazy_torch()
    with torch.no_grad():
        out = module(*[torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in inputs])
    return [o.detach().cpu().numpy() for o in _flatten_outputs(out)]


def ort_session(onnx_path: str):
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise missing_extra("onnxruntime", e) from e
    def options():
        made = ort.SessionOptions()
        # Its errors come back as exceptions, said once in our messages; its own log
        # would print them again on stderr.
        made.log_severity_level = 4
        return made

    try:
        return ort.InferenceSession(onnx_path, options(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 (onnxruntime raises its own Fail/InvalidArgument kinds)
        # onnxruntime's graph optimizer rewrites some valid graphs into invalid ones
        # (MEGA's: "Node input ... is not a graph input ... or output of a previous
        # node"); its plain kernels, unoptimized, are the reference then. A graph it
        # cannot load either way raises as before.
        plain = options()
        plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(onnx_path, plain, providers=["CPUExecutionProvider"])


def run_ort(onnx_path: str, feeds: Dict[str, np.ndarray], session=None) -> List[np.ndarray]:
    """onnxruntime on ``feeds``; ``session`` (from :func:`ort_session`) reused when given."""
    session = session or ort_session(onnx_path)
    # An input the model never reads is not in the exported graph (torch leaves it out).
    wanted = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in wanted})


# A check whose reference (torch, onnxruntime) raised on the batch, not the SavedModel.
REFERENCE_RAISED = "the reference raised: "


@dataclasses.dataclass
class ExportFinding:
    """onnxruntime on the exported ONNX against torch, at one batch size: the export
    itself is not the torch model there (it raised, at ``node`` when onnxruntime named
    it, or is off by ``max_abs``). Not a check of the SavedModel: it says where a
    SavedModel that matches onnxruntime but not torch went wrong."""

    batch: int
    output: Optional[str]
    max_abs: Optional[float]
    error: Optional[str] = None
    op: Optional[str] = None
    node: Optional[str] = None
    where: Optional[str] = None  # the node and the module it came from (convert.py fills it)


# onnxruntime's forms: "... while running Gather node. Name:'/model/layers.0/Gather_30'",
# "... implementation for ArgMin(13) node with name '/model/ArgMin'" (no kernel),
# "Node (/model/If) Op (If) [TypeInferenceError] ..." (the file does not load).
_ORT_NODE = (re.compile(r"running (\w+) node\. Name:'([^']*)'"),
             re.compile(r"implementation for (\w+)\(\d+\) node with name '([^']*)'"),
             re.compile(r"Node \(([^)]*)\) Op \((\w+)\)"))


def ort_node(message: str) -> Tuple[Optional[str], Optional[str]]:
    """(op, node) that an onnxruntime error names, or (None, None).

    >>> ort_node("Could not find an implementation for ArgMin(13) node with name '/m/ArgMin'")
    ('ArgMin', '/m/ArgMin')
    >>> ort_node("Node (/m/If) Op (If) [TypeInferenceError] Graph attribute inferencing failed")
    ('If', '/m/If')
    """
    for i, pattern in enumerate(_ORT_NODE):
        found = pattern.search(message or "")
        if found:
            op, node = found.groups() if i < 2 else found.groups()[::-1]
            return op, node
    return None, None


def _ort_failure(batch: int, error: Exception) -> ExportFinding:
    op, node = ort_node(str(error))
    return ExportFinding(batch, None, None, short_message(error), op, node)


def _failed(batch: int, names: Sequence[str], reference: str, dtypes: Sequence[str],
            error: Exception) -> List[OutputCheck]:
    message = short_message(error)
    return [OutputCheck(batch, name, reference, dtype, None, None, None, False, message)
            for name, dtype in zip(names, dtypes, strict=True)]


def run_fresh(module: str, marker: str, saved_model_dir: str,
              request: Dict[str, np.ndarray], spec: dict, timeout: int = VERIFY_TIMEOUT_S):
    """``python -m module`` on the SavedModel in a separate process with oneDNN off (a
    warm worker, see the module docstring), given ``request`` (written as npz) and
    ``spec`` (JSON). Returns ``(payload, answer arrays)``, or the text of why the child
    gave no answer."""
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-verify-") as work:
        request_path = os.path.join(work, "request.npz")
        answer = os.path.join(work, "answer.npz")
        np.savez(request_path, **request)
        try:
            result = child.run_python(["-m", module, saved_model_dir, request_path, answer,
                                       json.dumps(spec)], marker, timeout=timeout,
                                      env=child.SERVING_CPU_ENV, warm=True)
        except Exception as e:  # noqa: BLE001  (a timeout is a failed check, not a crash)
            return f"the fresh-process check did not finish: {short_message(e)}"
        if result.payload is None:
            return (f"loading the SavedModel in a fresh process failed (exit "
                    f"{result.returncode}): {result.stderr_tail}")
        with np.load(answer) as data:
            return result.payload, {key: data[key] for key in data.files}


def serve_fresh(saved_model_dir: str, feeds_by_batch: Dict[int, Dict[str, np.ndarray]],
                inputs: Sequence[TensorSpec], output_names: Sequence[str],
                via_batch: Optional[int]) -> Dict[str, object]:
    """``serving_default`` (and, at ``via_batch``, ``serving_tf_example``) run in a fresh
    process (``run_fresh``). Returns ``{str(batch) | "via": [outputs] | error text}``."""
    request = {f"{b}::{name}": value for b, feeds in feeds_by_batch.items()
               for name, value in feeds.items()}
    spec = {"inputs": [s.to_text() for s in inputs], "outputs": list(output_names),
            "batches": list(feeds_by_batch), "via_batch": via_batch}
    answer = run_fresh(CHILD_MODULE, CHILD_MARKER, saved_model_dir, request, spec)
    if isinstance(answer, str):
        return {key: answer for key in [*map(str, feeds_by_batch), "via"]}
    payload, arrays = answer
    out: Dict[str, object] = dict(payload["errors"])
    for key in payload["done"]:
        out[key] = [arrays[f"{key}::{name}"] for name in output_names]
    return out


def verify(saved_model_dir: str, onnx_path: str, inputs: Sequence[TensorSpec],
           output_names: Sequence[str], torch_module=None, atol: float = DEFAULT_ATOL,
           rtol: float = 0.0, batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
           real_inputs: Optional[Dict[str, np.ndarray]] = None,
           export_findings: Optional[List[ExportFinding]] = None,
           row_wise: bool = False) -> List[OutputCheck]:
    """TF (fresh process, oneDNN off) vs torch (when given) and vs onnxruntime, per batch
    size and output.

    Never raises for a model that fails: a side that raises at a batch size is
    a failed check carrying the error (the SavedModel is then not equivalent).
    With torch given, where onnxruntime on the exported ONNX raises or differs from
    torch is appended to ``export_findings`` (when given): the export's own faults.
    ``row_wise``: the ONNX was exported for one row (the SavedModel serves row by
    row), so onnxruntime runs it on each row and the rows are stacked.
    """
    unknown = ["unknown"] * len(output_names)
    feeds_by_batch = {}
    for batch in batch_sizes:
        feeds = make_inputs(inputs, batch)
        if real_inputs is not None:
            feeds = examples.tile_rows(real_inputs, batch) or feeds
        feeds_by_batch[batch] = feeds
    via_batch = batch_sizes[min(1, len(batch_sizes) - 1)] if batch_sizes else None
    served = serve_fresh(saved_model_dir, feeds_by_batch, inputs, output_names, via_batch)
    checks: List[OutputCheck] = []
    sessions = []  # one onnxruntime session for every batch, made on first use

    def ort_run(feeds):
        if not sessions:
            sessions.append(ort_session(onnx_path))
        if not row_wise:
            return run_ort(onnx_path, feeds, sessions[0])
        n = len(next(iter(feeds.values())))
        rows = [run_ort(onnx_path, {k: v[i:i + 1] for k, v in feeds.items()}, sessions[0])
                for i in range(n)]
        return [np.concatenate(parts) for parts in zip(*rows, strict=True)]

    for batch, feeds in feeds_by_batch.items():
        refs = []
        runners = [("onnxruntime", lambda f=feeds: ort_run(f))]
        if torch_module is not None:
            runners.insert(0, ("torch", lambda f=feeds: run_torch(torch_module, f, inputs)))
        for ref_name, run in runners:
            try:
                refs.append((ref_name, [np.asarray(r) for r in run()]))
            except Exception as e:  # the reference itself cannot run this batch
                failed = _failed(batch, output_names, ref_name, unknown, e)
                for c in failed:  # the reference's own failure, told from the SavedModel's
                    c.error = f"{REFERENCE_RAISED}{c.error}"
                if ref_name == "onnxruntime" and refs and refs[0][0] == "torch":
                    # onnxruntime failing on the exported ONNX is its limitation, not the
                    # SavedModel's: torch, the source, still decides (and is checked).
                    for c in failed:
                        c.ok, c.error = True, f"reference unavailable: {c.error}"
                    if export_findings is not None:
                        export_findings.append(_ort_failure(batch, e))
                checks.extend(failed)
        if export_findings is not None and len(refs) == 2:
            export_findings.extend(_export_differences(batch, output_names, refs, atol, rtol))
        dtypes = [str(r.dtype) for r in refs[0][1]] if refs else unknown
        got = served.get(str(batch))
        if not isinstance(got, list):  # a SavedModel that raised at this batch size
            for ref_name, _ in refs:
                checks.extend(_failed(batch, output_names, ref_name, dtypes,
                                      RuntimeError(str(got))))
            continue
        for ref_name, ref_out in refs:
            if len(ref_out) != len(output_names):
                checks.extend(_failed(batch, output_names, ref_name, dtypes, ValueError(
                    f"{ref_name} returned {len(ref_out)} outputs, {len(output_names)} declared")))
                continue
            for name, r, g in zip(output_names, ref_out, got, strict=True):
                c = compare.compare(r, g, atol, rtol)
                checks.append(OutputCheck(batch, name, ref_name, str(r.dtype),
                                          c.max_abs, c.max_rel, c.mismatches, c.ok,
                                          scale=compare.scale(r)))
        if batch == via_batch:
            via = served.get("via")
            if not isinstance(via, list):
                checks.extend(_failed(batch, output_names, VIA_EXAMPLES,
                                      [str(g.dtype) for g in got], RuntimeError(str(via))))
                continue
            for name, g, v in zip(output_names, got, via, strict=True):
                c = compare.compare(g, v, atol, rtol)
                checks.append(OutputCheck(batch, name, VIA_EXAMPLES, str(g.dtype), c.max_abs,
                                          c.max_rel, c.mismatches, c.ok,
                                          scale=compare.scale(g)))
    return checks


def _export_differences(batch: int, output_names: Sequence[str], refs, atol: float,
                        rtol: float) -> List[ExportFinding]:
    (_, torch_out), (_, ort_out) = refs
    if len(torch_out) != len(ort_out) or len(ort_out) != len(output_names):
        return []  # reported by the checks against the SavedModel
    out = []
    for name, t, o in zip(output_names, torch_out, ort_out, strict=True):
        if np.shape(t) != np.shape(o):
            out.append(ExportFinding(batch, name, None, f"shape {list(np.shape(o))} from "
                                     f"onnxruntime, {list(np.shape(t))} from torch"))
            continue
        c = compare.compare(t, o, atol, rtol)
        if not c.ok:
            out.append(ExportFinding(batch, name, c.max_abs))
    return out


def max_float_error(checks: Sequence[OutputCheck]) -> Optional[float]:
    """The largest measured error over float outputs; None when none was measured."""
    measured = [c.max_abs for c in checks if c.max_abs is not None
                and not c.dtype.startswith(("int", "uint", "bool", "unknown"))]
    return max(measured) if measured else None


def examples_from_feeds(feeds: Dict[str, np.ndarray], inputs: Sequence[TensorSpec]
                        ) -> List[bytes]:
    """Serialized tf.Examples carrying the feeds (ints as int64_list, floats float_list)."""
    import tensorflow as tf

    n = len(next(iter(feeds.values())))
    out = []
    for i in range(n):
        ex = tf.train.Example()
        for s in inputs:
            values = np.asarray(feeds[s.name][i]).reshape(-1)
            f = ex.features.feature[s.name]
            if s.dtype.startswith("float"):
                f.float_list.value.extend(values.astype(np.float32).tolist())
            else:
                f.int64_list.value.extend(values.astype(np.int64).tolist())
        out.append(ex.SerializeToString())
    return out

