"""The onnx2tf call: onnx2tf 1.24.1 in a child process, with the graph rewrites it
needs (graph_rewrites.py) and its failures turned into messages that name the op and node.

onnx2tf sets process-wide TF and logging globals and rewrites its input in
place, so it runs in a child (``runner.py``) on a private copy.
Non-verbose, its error block carries ``onnx_op_name:`` only (the op type is
looked up in the graph here), and its last line is a generic hint with ANSI
colour codes: neither reaches the user.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

from tfx_bridge import child
from tfx_bridge.components.pytorch_model_importer.errors import (
    ConversionError,
    missing_extra,
)
from tfx_bridge.components.pytorch_model_importer.onnx2tf.graph_rewrites import (
    fix_dynamic_reshapes,
    unconvertible_nodes,
)
from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite, describe_node
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec

NAME = "onnx2tf"
RUNNER_MODULE = "tfx_bridge.components.pytorch_model_importer.onnx2tf.runner"
TIMEOUT_S = 1800
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_OP_NAME = re.compile(r"onnx_op_name:\s*(\S+)")
_OP_TYPE = re.compile(r"onnx_op_type:\s*(\S+)")
# onnx2tf's closing hints, printed after every failure whatever the cause.
_GENERIC = ("-onwdt", "NonMaxSuppression", "onnx2tf -h", "github.com", "https://")
_ERROR_LINE = re.compile(r"\b\w*(Error|Exception)\b")


def available() -> bool:
    import importlib.util
    return importlib.util.find_spec("onnx2tf") is not None


def _node_types(onnx_path: str) -> Dict[str, str]:
    import onnx
    model = onnx.load(onnx_path, load_external_data=False)
    return {n.name: n.op_type for n in model.graph.node}


def failure_message(text: str, onnx_path: str, types: Dict[str, str]) -> str:
    """What onnx2tf's output says failed: the op type, node, module and the error line."""
    clean = _ANSI.sub("", text)
    lines = [re.sub(r"^(ERROR|WARNING|INFO):\s*", "", ln.strip())
             for ln in clean.splitlines() if ln.strip()]
    specific = [ln for ln in lines if not any(g in ln for g in _GENERIC)]
    errors = [ln for ln in specific if _ERROR_LINE.search(ln)]
    detail = (errors or specific or ["(no output)"])[-1][:400]
    name = _OP_NAME.search(clean)
    if not name:
        return f"onnx2tf failed: {detail}"
    op_type = _OP_TYPE.search(clean)
    op = op_type.group(1) if op_type else _node_types(onnx_path).get(name.group(1), "?")
    return f"onnx2tf cannot convert {describe_node(op, name.group(1), types)}: {detail}"


def convert(onnx_path: str, workdir: str, inputs: Sequence[TensorSpec],
            types: Optional[Dict[str, str]] = None, graph_rewrites: bool = True
            ) -> tuple[str, List[Rewrite]]:
    """onnx2tf on a private, rewritten copy; returns (SavedModel folder, rewrites)."""
    if not available():
        raise missing_extra("onnx2tf", ImportError("No module named 'onnx2tf'"))
    private = os.path.join(workdir, "model_for_onnx2tf.onnx")
    shutil.copyfile(onnx_path, private)
    rewrites = fix_dynamic_reshapes(private, inputs) if graph_rewrites else []
    problems = unconvertible_nodes(private, types or {})
    if problems:
        raise ConversionError("onnx2tf cannot convert this model; " + "; ".join(problems) + ".")
    out = os.path.join(workdir, "onnx2tf_out")
    keep = ",".join(s.name for s in inputs if len(s.shape) >= 3)
    env = dict(os.environ)
    # onnx2tf shells out to the onnxsim CLI, which lives beside this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    keep_copy = os.path.join(workdir, "model_for_onnx2tf_in.onnx")
    shutil.copyfile(private, keep_copy)  # onnx2tf rewrites its input in place
    proc = subprocess.run(child.module_command(RUNNER_MODULE, private, out, keep),
                          capture_output=True, text=True, env=env, cwd=workdir,
                          timeout=TIMEOUT_S)
    if proc.returncode != 0 or not os.path.exists(os.path.join(out, "saved_model.pb")):
        raise ConversionError(failure_message(proc.stdout + "\n" + proc.stderr, keep_copy,
                                              types or {}))
    return out, rewrites
