"""Conversion refusals name the op, node, variant, shapes, PyTorch module and the fix."""
from __future__ import annotations

import io
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge.components.pytorch_model_importer import convert, signature  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.errors import ConversionError  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.onnx2tf import convert as onnx2tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402


def test_import_refused_op_variant_names_op_node_variant_module_and_fix(tmp_path):
    path = str(tmp_path / "w.pt")
    torch.save(zoo.PoolIndicesNet().state_dict(), path)
    config = ImporterConfig(source_kind="state_dict", source_path=path,
                            module_class="zoo:PoolIndicesNet", inputs=["image:float32:-1,3,-1,-1"],
                            output_names=["score"], converter="tfx-bridge")
    with pytest.raises(ConversionError,
                       match=r"nothing was written\. ONNX op MaxPool \(node "
                             r"/model/features/pool/MaxPool, from module 'features\.pool' "
                             r"\(MaxPool2d\)\): MaxPool Indices with dynamic spatial "
                             r"dimensions is not supported \[inputs image: \(None, 3, None, "
                             r"None\)\]\. Declare fixed spatial sizes"):
        convert.import_model(config, str(tmp_path / "model"))
    assert not os.path.exists(tmp_path / "model" / convert.SERVING_DIR)


def test_onnx2tf_failure_message_names_node_without_generic_tail_or_ansi(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Einsum", ["a", "b"], ["c"], name="/attn/Einsum",
                          equation="ij,jk->ik")], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2]) for n in "ab"],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 2])])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph), path)
    log = ("\x1b[31mERROR:\x1b[0m The trace log is below.\n"
           "\x1b[31mERROR:\x1b[0m onnx_op_name: /attn/Einsum\n"
           "\x1b[31mERROR:\x1b[0m ValueError: Dimensions must be equal, but are 16 and 2\n"
           "\x1b[31mERROR:\x1b[0m If the input OP of ONNX before conversion is NHWC or an "
           "irregular channel arrangement other than NCHW, use the -kt or -kat option.\n"
           "\x1b[31mERROR:\x1b[0m Also, for models that include NonMaxSuppression in the "
           "post-processing, try the -onwdt option.\n")
    message = onnx2tf.failure_message(log, path, {"attn": "module 'attn' (Attention)"})
    assert message == ("onnx2tf cannot convert ONNX op Einsum (node /attn/Einsum, from module "
                       "'attn' (Attention)): ValueError: Dimensions must be equal, but "
                       "are 16 and 2")
    assert "\x1b" not in message and "onwdt" not in message


class _MaskInner(torch.nn.Module):
    def forward(self, mask):
        return torch.cummax(mask + 1, 1)[0].float()  # torch 2.5 has no ONNX symbolic for it


class _MaskOuter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _MaskInner()

    def forward(self, mask):
        return self.block(mask) * 2.0


def test_export_unsupported_torch_op_names_reason_line_and_module(tmp_path):
    from tfx_bridge.components.pytorch_model_importer.errors import ModelSourceError
    from tfx_bridge.components.pytorch_model_importer.export import stage

    specs = signature.parse_input_specs(["mask:int64:-1,4"])
    with pytest.raises(ModelSourceError,
                       match=r"torch\.onnx\.export refused the model: .*aten::cummax.* "
                             r"not supported.*\(at test_refusals\.py:\d+ in "
                             r"forward\(\), PyTorch module 'block' \(_MaskInner\)\)\. Cause "
                             r"and fix: torch's exporter has no ONNX form for it at this "
                             r"opset \(a torch limitation\)") as e:
        stage.export_onnx(_MaskOuter().eval(), specs, ["y"], str(tmp_path / "m.onnx"))
    assert "Caused by" not in str(e.value) and "%" not in str(e.value)


class _ScriptedHeads(torch.nn.Module):
    """Scripted, not traced: its branch stays in the graph, which is not re-traced."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)

    def forward(self, x):
        y = self.proj(x)
        if x.size(1) > 1:
            y = y * 2
        return y.unflatten(-1, (2, 16)).transpose(0, -2).sum(0)


def test_export_scripted_graph_without_shapes_refused_naming_that_cause_and_other_forms(
        tmp_path):
    """A scripted module saved with torch.jit.save: its transpose needs a rank the saved
    graph does not have, and its control flow keeps it from being traced again."""
    from tfx_bridge.components.pytorch_model_importer.errors import ModelSourceError
    from tfx_bridge.components.pytorch_model_importer.export import stage

    path = str(tmp_path / "heads.pt")
    torch.jit.script(_ScriptedHeads().eval()).save(path)
    specs = signature.parse_input_specs(["x:float32:-1,5,16"])
    with pytest.raises(ModelSourceError, match=r"transpose for tensor of unknown rank "
                       r"\(PyTorch module '\(root\)' \(_ScriptedHeads\)\)\. Cause and fix: "
                       r"the TorchScript file keeps no tensor shapes.*--state-dict") as e:
        stage.export_onnx(torch.jit.load(path).eval(), specs, ["y"],
                          str(tmp_path / "m.onnx"))
    assert "cast integer masks" not in str(e.value)


class _SplitPerRow(torch.nn.Module):
    """Splits its batch by sizes read with .tolist(): a trace freezes the example's."""

    def forward(self, x):
        sizes = (x[:, 0] > -10).long().tolist()
        return torch.cat([part * (i + 1) for i, part in enumerate(torch.split(x, sizes))])


def test_export_torchscript_traced_batch_frozen_refused_naming_batches_it_runs(tmp_path):
    from tfx_bridge.components.pytorch_model_importer.errors import ModelSourceError
    from tfx_bridge.components.pytorch_model_importer.export import stage

    path = str(tmp_path / "split.pt")
    with torch.no_grad():
        torch.jit.trace(_SplitPerRow(), torch.zeros(3, 4), check_trace=False).save(path)
    specs = signature.parse_input_specs(["x:float32:-1,4"])
    with pytest.raises(ModelSourceError, match=r"torch itself cannot run this TorchScript "
                       r"module at batch 32 \(RuntimeError: split_with_sizes.*\); it runs at "
                       r"batch 3 of 1-8: torch\.jit\.trace froze.*--module-class") as e:
        stage.export_onnx(torch.jit.load(path).eval(), specs, ["y"],
                          str(tmp_path / "m.onnx"))
    assert "keeps no tensor shapes" not in str(e.value)


def test_export_failure_bitwise_op_on_integers_advises_bool_masks():
    from tfx_bridge.components.pytorch_model_importer.export import stage

    class Or(torch.nn.Module):
        def forward(self, a):
            return (a | (a + 1)).float()

    with pytest.raises(Exception) as raised:
        torch.onnx.export(Or(), (torch.ones(2, 3, dtype=torch.int64),), io.BytesIO(),
                          opset_version=17, dynamo=False)
    said = stage._export_failure(raised.value, [])
    assert said.startswith("torch.onnx.export refused the model: ONNX export does NOT "
                           "support exporting bitwise OR"), said
    assert said.endswith("Cause and fix: cast integer masks to bool before |, & or ~ on "
                         "that line."), said


def test_import_onnx_onnxruntime_cannot_run_not_blessed_cause_names_node_and_fix(tmp_path):
    """onnxruntime has no int64 ArgMin kernel: an ONNX hand-over with one has no
    reference, and the likely cause says so, naming the node and the other forms."""
    import onnx
    from onnx import TensorProto, helper

    from tfx_bridge.components.pytorch_model_importer import report

    graph = helper.make_graph(
        [helper.make_node("ArgMin", ["ids"], ["pos"], name="/router/ArgMin", axis=1)], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [None, 4])],
        [helper.make_tensor_value_info("pos", TensorProto.INT64, [None, 1])])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    config = ImporterConfig(source_kind="onnx", source_path=path, inputs=["ids:int64:-1,4"],
                            output_names=["pos"], converter="tfx-bridge")
    result = convert.import_model(config, str(tmp_path / "model"), batch_sizes=(1, 3))
    assert not result.blessed
    cause = report.likely_cause(result.report)
    assert cause.startswith("onnxruntime, the only reference an ONNX hand-over is checked "
                            "against, cannot run this file at ONNX op ArgMin (node "
                            "/router/ArgMin)")
    assert "hand over the model's state_dict or TorchScript" in cause


def test_import_onnx_file_broken_in_onnxruntime_too_refused_as_the_files_fault(tmp_path):
    """An Expand to a size the export fixed (rotary embeddings exported at one config):
    no converter takes it, and onnxruntime fails at the same node, so the refusal
    names the node and blames the file, not the converter."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tfx_bridge.components.pytorch_model_importer.errors import ModelSourceError

    consts = [helper.make_node("Constant", [], ["freq"], name="/rotary/Constant",
                               value=numpy_helper.from_array(np.ones((1, 8, 1), np.float32))),
              helper.make_node("Constant", [], ["shape"], name="/rotary/Constant_1",
                               value=numpy_helper.from_array(np.array([1, 2, 1], np.int64)))]
    graph = helper.make_graph(
        [*consts, helper.make_node("Expand", ["freq", "shape"], ["e"], name="/rotary/Expand"),
         helper.make_node("Mul", ["e", "x"], ["y"], name="/rotary/Mul")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8, 1])])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    config = ImporterConfig(source_kind="onnx", source_path=path, inputs=["x:float32:-1,1,1"],
                            output_names=["y"], converter="tfx-bridge")
    with pytest.raises(ModelSourceError) as raised:
        convert.import_model(config, str(tmp_path / "model"))
    message = str(raised.value)
    assert message.startswith("The ONNX file handed over does not run in onnxruntime either "
                              "at ONNX op Expand (node /rotary/Expand")
    assert "export it again with those axes dynamic, or hand over the state_dict" in message
    assert "The converters' own refusal: The tfx-bridge converter cannot convert" in message
    assert not os.path.exists(tmp_path / "model" / convert.SERVING_DIR)


def test_likely_cause_onnxruntime_missing_kernel_not_blamed_on_export():
    """onnxruntime without an int64 ArgMin kernel says nothing about the export: the
    cause is the traced Python branch."""
    from tfx_bridge.components.pytorch_model_importer import report

    missing = {"batch": 1, "output": None, "max_abs": None, "op": "ArgMin",
               "node": "/model/ArgMin", "where": "ONNX op ArgMin (node /model/ArgMin)",
               "error": "NotImplemented: [ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could "
                        "not find an implementation for ArgMin(13) node"}
    base = {"blessed": False, "source": {"kind": "state_dict"}, "checks": [],
            "trace_warnings": ["modeling.py:940: Converting a tensor to a Python boolean"]}
    cause = report.likely_cause({**base, "export_check": [missing]})
    assert cause.startswith("torch traced Python control flow on tensor values "
                            "(TracerWarning) at modeling.py:940")
    assert "not the torch model" not in cause
    assert report.likely_cause({**base, "export_check": [missing], "trace_warnings": []}) \
        is None


def test_likely_cause_float32_rounding_at_a_large_output_scale_names_an_atol_that_passes():
    from tfx_bridge.components.pytorch_model_importer import report

    def check(batch, max_abs, ok, scale=456.0, dtype="float32", output="logits"):
        return {"batch": batch, "output": output, "reference": "onnxruntime", "dtype": dtype,
                "max_abs": max_abs, "max_rel": 0.03, "mismatches": 0 if ok else 9, "ok": ok,
                "error": None, "scale": scale}
    base = {"blessed": False, "source": {"kind": "onnx"},
            "tolerance": {"atol": 1e-4, "rtol": 0.0}}
    rounding = [check(1, 2.21e-4, False), check(32, 2.82e-4, False), check(7, 0.0, True)]
    cause = report.likely_cause({**base, "checks": rounding})
    assert cause.startswith("every check that failed is off by at most 0.000282, on logits "
                            "values up to 456 (6e-07 of them): float32 rounding")
    assert "atol 0.0001 does not allow" in cause and "(--atol 0.0006)" in cause
    # A difference beyond rounding at its scale, or on an output with no scale (integers),
    # is no tolerance matter.
    for other in ([check(1, 0.05, False)], [check(1, 2e-4, False, scale=None, dtype="int64")],
                  [check(1, 2e-4, False), check(1, 3.0, False, scale=10.0, output="p")]):
        assert report.likely_cause({**base, "checks": other}) is None
    assert report.likely_cause({**base, "blessed": True, "checks": rounding}) is None
