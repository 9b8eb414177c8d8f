"""ONNX graph rewrites applied before onnx2tf, each named in the import report, and
the ops onnx2tf has no converter for.

No TFX imports; onnx and onnxruntime are imported lazily (the ``onnx`` extra).

onnx2tf 1.24.1 converts most graphs, but it resolves some shape arithmetic with
a batch of 1 when the batch is dynamic, and the SavedModel then fails at any
other batch size:

- ``Flatten``: onnx2tf moves the axis into its NHWC layout and, when the axis
  lands on the last dimension, reshapes to ``(1, -1)`` (every torchvision
  classifier: ``[N, C, 1, 1] -> [N, C]`` comes out as ``[1, N*C]``).
- ``Reshape`` with a shape computed from ``Shape``/``Gather``/``Concat`` (the
  exporter's form of advanced indexing, ``z[:, li, lj]`` in DLRM): the shape
  subgraph is evaluated at batch 1 and frozen.

The rewrite replaces both with a ``Reshape`` to a constant shape holding ``-1``
in the one dimension that varies with the batch. Which dimension varies is
measured, not guessed: the graph runs in onnxruntime at two batch sizes (and
two sizes of every other dynamic input dimension), and a dimension is fixed
only if it had the same size in both runs. A node whose output has two or more
varying dimensions is left alone (it is then up to the equivalence check).
"""
from __future__ import annotations

import re
from typing import Dict, List, Sequence

import numpy as np

from tfx_bridge.components.pytorch_model_importer.errors import ConversionError
from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite, describe_node
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec

RESHAPE_DYNAMIC_BATCH = "reshape-dynamic-batch"


def _observed_shapes(model, names: Sequence[str], inputs: Sequence[TensorSpec]
                     ) -> List[Dict[str, tuple]]:
    """The shapes of tensors ``names`` in two onnxruntime runs of different sizes."""
    import onnx
    import onnxruntime as ort

    from tfx_bridge.components.pytorch_model_importer.signature import make_inputs

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    for name in names:
        if name not in existing:
            probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    wanted = list(names)
    runs = []
    batch = None
    try:
        session = ort.InferenceSession(probe.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        for batch, free in ((2, 4), (3, 5)):
            feeds = make_inputs(inputs, batch, free=free)
            values = session.run(wanted, feeds)
            runs.append({n: tuple(np.shape(v)) for n, v in zip(wanted, values, strict=True)})
    except Exception as e:  # onnxruntime raises its own Fail/InvalidArgument kinds
        what = str(e).split("Status Message:", 1)[-1].strip().splitlines()[0][:300]
        node = re.search(r"Name:'([^']+)'|Node \(([^)]+)\)", str(e))
        where = f" at node {node.group(1) or node.group(2)}" if node else ""
        at = "loading it" if batch is None else f"batch {batch}"
        raise ConversionError(
            f"onnxruntime cannot run the exported ONNX graph ({at}){where}: {what}. The "
            "export froze a size of its sample input (torch traced a shape as a constant); "
            "the graph is only right for that size. Write the shape arithmetic with "
            "tensor.shape / torch ops rather than Python ints, or export the ONNX yourself "
            "with dynamic axes and hand it over.") from e
    return runs


def _target_shape(a: tuple, b: tuple):
    """A constant reshape target from two observed shapes, or None if not expressible."""
    if len(a) != len(b):
        return None
    varying = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if len(varying) > 1:
        return None
    return [-1 if i in varying else int(d) for i, d in enumerate(a)]


def fix_dynamic_reshapes(path: str, inputs: Sequence[TensorSpec]) -> List[Rewrite]:
    """Rewrites ``Flatten`` and shape-computed ``Reshape`` nodes in place; returns what changed.

    Only graphs with a dynamic batch are touched; the rewritten graph is checked
    with onnx.checker and computes the same values (a reshape to the shape it
    had in both measured runs).
    """
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(path)
    graph = model.graph
    constants = {t.name for t in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    targets = [n for n in graph.node
               if n.op_type == "Flatten"
               or (n.op_type == "Reshape" and len(n.input) > 1 and n.input[1] not in constants)]
    if not targets:
        return []
    first, second = _observed_shapes(model, [n.output[0] for n in targets], inputs)
    changed = []
    for node in targets:
        target = _target_shape(first[node.output[0]], second[node.output[0]])
        if target is None:
            continue
        shape_name = f"{node.name or node.output[0]}__tfx_bridge_shape"
        graph.initializer.append(numpy_helper.from_array(np.array(target, np.int64),
                                                         shape_name))
        data = node.input[0]
        replacement = helper.make_node("Reshape", [data, shape_name], list(node.output),
                                       name=node.name)
        index = list(graph.node).index(node)
        graph.node.remove(node)
        graph.node.insert(index, replacement)
        changed.append(f"{node.op_type} {node.name or node.output[0]} -> {target}")
    if not changed:
        return []
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return [Rewrite(RESHAPE_DYNAMIC_BATCH, changed,
                    "onnx2tf freezes Flatten and shape-computed Reshape at batch 1; replaced "
                    "with a Reshape to a constant shape, -1 in the dimension that varies")]


# What to change in the PyTorch model, per ONNX op onnx2tf 1.24.1 has no converter for.
_OP_FIXES = {
    "Loop": ("it is a loop the exporter could not unroll, most often nn.EmbeddingBag inside a "
             "TorchScript file or a Python loop over a tensor's length: hand over the "
             "state_dict with --module-class (the importer exports fixed-width EmbeddingBags as "
             "gather + reduce), or loop over a fixed size"),
    "SequenceMap": "it is a loop over a list of tensors: loop over a fixed count instead",
    "Scan": "it is a scan over a tensor dimension: unroll it over a fixed size",
}
_DEFAULT_FIX = ("rewrite that part of the model with ops onnx2tf converts (see onnx2tf's README "
                "for the list), or hand over the state_dict with --module-class")


def onnx2tf_ops() -> set:
    """The ONNX op types onnx2tf has a converter for (one module per op under onnx2tf/ops).

    Read from the installed package's files, without importing it: importing
    onnx2tf sets process-wide TF and logging globals.
    """
    import importlib.util
    import os

    spec = importlib.util.find_spec("onnx2tf")
    if spec is None or not spec.submodule_search_locations:
        return set()
    ops_dir = os.path.join(list(spec.submodule_search_locations)[0], "ops")
    return {f[:-3] for f in os.listdir(ops_dir)
            if f.endswith(".py") and not f.startswith("_")}


def fix_for(op: str) -> str:
    return _OP_FIXES.get(op, _DEFAULT_FIX)


def unconvertible_nodes(path: str, types: Dict[str, str]) -> List[str]:
    """One line per top-level node whose op onnx2tf cannot convert (empty: all convertible)."""
    import onnx

    supported = onnx2tf_ops()
    if not supported:
        return []
    model = onnx.load(path, load_external_data=False)
    problems = []
    for node in model.graph.node:
        if node.op_type not in supported:
            problems.append(f"{describe_node(node.op_type, node.name, types)}: "
                            f"{fix_for(node.op_type)}")
    return problems
