"""TrtOptimizer's TFLite candidate: serving_default as ``model.tflite`` that TF Serving's
TfLiteSession can run (builtin ops only; it has no Flex kernels). No TFX imports.

TF Serving's TFLite runtime (``--prefer_tflite_model=true``) has no ``Erf``
kernel, and GELU (exact, as PyTorch exports it) is built on Erf. When the
converter names Erf as the only missing op, Erf is lowered to builtin ops
and the conversion is retried: its Taylor series (11 terms) below |x| = 1,
where it keeps the relative accuracy small arguments need, and Abramowitz &
Stegun's formula 7.1.26 above. Measured against exact erf in float32: at
most 1.8e-7 absolute, 1.8e-7 relative below 1; TF's own float32 Erf kernel
is off by up to 3.1e-7. The drift gate then compares the result with the
original like any candidate, and the report names the rewrite.

Example:
  >>> from tfx_bridge.components.trt_optimizer import tflite
  >>> built = tflite.build("/models/mlp/Format-Serving", "/tmp/mlp_lite")  # doctest: +SKIP
  >>> built.flags, built.notes  # doctest: +SKIP
  (['--prefer_tflite_model=true'], [])
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tempfile
from typing import List, Sequence, Tuple

from tfx_bridge import child
from tfx_bridge.artifacts.savedmodel import SERVING_SIGNATURE, TFLITE_FILE, TFLITE_FLAG
from tfx_bridge.components.trt_optimizer.errors import OptimizerError
from tfx_bridge.components.trt_optimizer.results import Built

# Abramowitz & Stegun 7.1.26: erf(x) = 1 - (a1 t + ... + a5 t^5) exp(-x^2),
# t = 1 / (1 + p x), for x >= 0; odd symmetry for x < 0.
AS_P = 0.3275911
AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
# erf(x) = x * sum_n c_n x^(2n), c_n = 2/sqrt(pi) (-1)^n / (n! (2n + 1)); 11 terms leave
# under 1e-8 at |x| = 1.
SERIES = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
               for n in range(11))
SERIES_BELOW = 1.0
ERF_NOTE = ("Erf lowered to builtin ops (Taylor series below |x| 1, Abramowitz & Stegun "
            "7.1.26 above; |error| <= 2e-7): TF Serving's TFLite runtime has no Erf kernel")
LOWERABLE = {"Erf"}


def _missing_ops(error: Exception) -> List[str]:
    """The TF ops the converter could not map to builtins, from its error text."""
    text = str(error)
    ops = set(re.findall(r"'tf\.(\w+)' op is neither a custom op nor a flex op", text))
    found = re.search(r"TF Select ops: ([^\n]+)", text)
    if found:
        ops |= {op.strip() for op in found.group(1).split(",")}
    return sorted(ops)


def _convert(saved_model_dir: str) -> bytes:
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir,
                                                         signature_keys=[SERVING_SIGNATURE])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


def lower_erf(graph_def):
    """A copy of ``graph_def`` with every Erf node replaced by builtin-op arithmetic.

    The last node of each replacement keeps the Erf node's name, so its
    consumers are untouched. Returns ``(graph_def, count)``.
    """
    from tensorflow.core.framework import graph_pb2, node_def_pb2
    from tensorflow.python.framework import tensor_util

    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    count = 0
    for node in graph_def.node:
        if node.op != "Erf":
            out.node.add().CopyFrom(node)
            continue
        count += 1
        dtype = node.attr["T"]
        data = [i for i in node.input if not i.startswith("^")]
        control = [i for i in node.input if i.startswith("^")]
        prefix = node.name + "/erf_as_builtins/"

        def const(name, value, prefix=prefix, dtype=dtype):
            n = out.node.add(name=prefix + name, op="Const")
            n.attr["dtype"].type = dtype.type
            n.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(
                value, dtype=dtype.type, shape=[]))
            return n.name

        def op(name, kind, *inputs, prefix=prefix, dtype=dtype, final=None):
            n = node_def_pb2.NodeDef(name=final or prefix + name, op=kind, input=list(inputs))
            n.attr["T"].CopyFrom(dtype)
            out.node.add().CopyFrom(n)
            return n.name

        x = data[0]
        ax = op("abs", "Abs", x)
        one = const("one", 1.0)
        t = op("t", "RealDiv", one, op("den", "AddV2", op("px", "Mul", ax, const("p", AS_P)),
                                           one))
        poly = const("a5", AS_A[4])
        for i in (3, 2, 1, 0):  # Horner: ((a5 t + a4) t + a3) ...
            poly = op(f"h{i}", "AddV2", op(f"m{i}", "Mul", poly, t), const(f"a{i + 1}", AS_A[i]))
        poly = op("poly", "Mul", poly, t)
        decay = op("exp", "Exp", op("neg", "Neg", op("sq", "Mul", ax, ax)))
        y = op("y", "Sub", one, op("pe", "Mul", poly, decay))
        tail = op("tail", "Mul", op("sign", "Sign", x), y)
        u = op("u", "Mul", x, x)
        series = const("c10", SERIES[10])
        for i in range(9, -1, -1):
            series = op(f"s{i}", "AddV2", op(f"su{i}", "Mul", series, u),
                        const(f"c{i}", SERIES[i]))
        head = op("head", "Mul", x, series)
        small = op("small", "Less", ax, const("below", SERIES_BELOW))
        last = op("", "SelectV2", small, head, tail, final=node.name)
        out.node[-1].input.extend(control)
        assert last == node.name
    return out, count


def _save_lowered(source: str, out_dir: str) -> int:
    """serving_default frozen, Erf lowered, saved as a SavedModel in ``out_dir``."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    loaded = tf.saved_model.load(source)  # held: its variables must outlive the freeze
    fn = loaded.signatures[SERVING_SIGNATURE]
    frozen = convert_variables_to_constants_v2(fn)
    graph_def, count = lower_erf(frozen.graph.as_graph_def())
    specs = fn.structured_input_signature[1]
    names = sorted(specs)
    # Frozen inputs and outputs are flat, in tf.nest order (sorted keys).
    placeholders = [t.name for t in frozen.inputs]
    keys = sorted(fn.structured_outputs)
    fetches = [t.name for t in frozen.outputs]

    @tf.function(input_signature=[tf.TensorSpec(specs[n].shape, specs[n].dtype, name=n)
                                  for n in names])
    def serve(*args):
        outs = tf.graph_util.import_graph_def(
            graph_def, input_map=dict(zip(placeholders, args, strict=True)),
            return_elements=fetches, name="lowered")
        return dict(zip(keys, outs, strict=True))

    module = tf.Module()
    module.serve = serve
    tf.saved_model.save(module, out_dir, signatures={SERVING_SIGNATURE:
                                                     serve.get_concrete_function()})
    return count


def convert(source: str) -> Tuple[bytes, List[str]]:
    """serving_default of ``source`` as a TFLite flatbuffer of builtin ops, and the
    rewrites applied; raises OptimizerError naming the ops TFLite lacks. In this
    process: ``build`` runs it in a child one."""
    notes: List[str] = []
    try:
        flatbuffer = _convert(source)
    except Exception as e:  # ConverterError: name the missing ops, not the MLIR dump
        missing = _missing_ops(e)
        if not missing:
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
            raise OptimizerError(f"TFLite conversion failed: {first[:300]}") from e
        if not set(missing) <= LOWERABLE:
            raise OptimizerError(f"TFLite builtins lack {', '.join(missing)} (TF Serving's "
                                 "TFLite runtime has no Flex ops)") from e
        with tempfile.TemporaryDirectory(prefix="tfx-bridge-lowered-") as tmp:
            lowered = os.path.join(tmp, "saved_model")
            count = _save_lowered(source, lowered)
            try:
                flatbuffer = _convert(lowered)
            except Exception as e2:
                still = _missing_ops(e2)
                raise OptimizerError(
                    f"TFLite builtins lack {', '.join(still or missing)}, even after "
                    "lowering Erf (TF Serving's TFLite runtime has no Flex ops)") from e2
        notes.append(f"{ERF_NOTE} ({count} node{'s' if count != 1 else ''})")
    return flatbuffer, notes


def build(source: str, out_dir: str) -> Built:
    """``source`` (a SavedModel folder) copied unchanged to ``out_dir``, plus
    serving_default as ``model.tflite``; raises OptimizerError naming the ops
    TFLite lacks when it cannot be built from builtins.

    The converter runs in a child process: MLIR prints its diagnostics
    straight to the process's stderr, and a converter crash must not take the
    executor down."""
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-tflite-") as tmp:
        target = os.path.join(tmp, TFLITE_FILE)
        run = child.run_python(["-m", __name__, source, target], _RESULT, timeout=1800,
                               env=child.warm_env(), warm=True)
        if run.payload is None:
            raise OptimizerError(f"TFLite conversion crashed (exit {run.returncode}): "
                                 f"{run.stderr_tail}")
        result = run.payload
        if result["error"]:
            raise OptimizerError(result["error"])
        shutil.copytree(source, out_dir)
        shutil.copyfile(target, os.path.join(out_dir, TFLITE_FILE))
    return Built([TFLITE_FLAG], result["notes"])


_RESULT = "TFLITE_RESULT "
__all__ = ["Built", "build", "convert", "lower_erf"]


def main(argv: Sequence[str]) -> int:
    """Child process of ``build``: convert ``argv[0]`` into the file ``argv[1]``."""
    source, target = argv
    try:
        flatbuffer, notes = convert(source)
    except OptimizerError as e:
        print(_RESULT + json.dumps({"error": str(e), "notes": []}))
        return 0
    with open(target, "wb") as f:
        f.write(flatbuffer)
    print(_RESULT + json.dumps({"error": None, "notes": notes}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
