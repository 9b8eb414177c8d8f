"""PyTorchModelImporter on architectures nobody here designed: torchvision, torch.nn, HF.

CNN classifiers, DLRM, EmbeddingBag and the text CNN here; attention, BERT and
recurrent models in test_zoo_attention.py (two files, so two workers share the
conversions).

Each zoo model (zoo.py) is handed over as a research team would (state_dict +
class, TorchScript or ONNX), converted once per session, and must verify at
batch 1, 7 and 32 against torch and onnxruntime with its names kept.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
pytest.importorskip("torchvision", reason="needs the [zoo] extra (torchvision)")
pytest.importorskip("transformers", reason="needs the [zoo] extra (transformers)")


from tfx_bridge.components.pytorch_model_importer import (  # noqa: E402
    convert,
    rewrite,
    signature,
    swaps,
)
from tfx_bridge.components.pytorch_model_importer.errors import ConversionError  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402  (the state_dict handovers name zoo:Class, as users name their package)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.TESTED_A)
def test_zoo_model_equivalent_at_batch_1_7_32(zoo_imports, name):
    zoo.assert_equivalent(zoo_imports[name], name)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.TESTED_A)
def test_zoo_model_signature_names_kept(zoo_imports, name):
    zoo.assert_signature_kept(zoo_imports[name], name)


@pytest.mark.slow
@pytest.mark.parametrize("name,kind", [
    ("conv_pool_flatten", rewrite.RESHAPE_DYNAMIC_BATCH),
    ("resnet", rewrite.RESHAPE_DYNAMIC_BATCH),
    ("dlrm", rewrite.RESHAPE_DYNAMIC_BATCH),
    ("embedding_bag", swaps.EMBEDDING_BAG_DENSE),
])
def test_zoo_rewrite_named_in_report(zoo_imports, name, kind):
    zoo.assert_rewrite_named(zoo_imports[name], kind)


@pytest.mark.slow
def test_zoo_model_without_rewrites_reports_nothing_applied(zoo_imports):
    assert zoo_imports["text_cnn"].report["rewrites"] == []


@pytest.mark.parametrize("mode,padding_idx,weighted", [
    ("sum", None, False), ("sum", 0, True), ("mean", 0, False), ("mean", None, False),
    ("max", 0, False), ("max", None, False)])
def test_dense_embedding_bag_matches_torch_including_all_padding_bags(mode, padding_idx,
                                                                      weighted):
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(20, 4, mode=mode, padding_idx=padding_idx).eval()
    ids = torch.randint(0, 20, (6, 5))
    ids[0] = 0  # a bag made only of the padding id
    ids[1, :3] = 0
    weights = torch.rand(6, 5) if weighted else None
    dense = swaps.DenseEmbeddingBag(bag, "bag")
    with torch.no_grad():
        want = bag(ids, per_sample_weights=weights)
        got = dense(ids, per_sample_weights=weights)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)


def test_import_ragged_embedding_bag_refused_up_front(tmp_path):
    path = str(tmp_path / "bag.pt")
    torch.save(zoo.RaggedBag().state_dict(), path)
    source = convert.ModelSource("state_dict", path, "zoo:RaggedBag", {})
    specs = signature.parse_input_specs(["ids:int64:-1", "offsets:int64:-1"])
    with pytest.raises(swaps.RaggedBagError,
                       match=r"EmbeddingBag 'bag' is called with 1-D ids and offsets.*"
                             r"padding_idx=PAD.*per_sample_weights with zeros"):
        convert.import_model(source, specs, ["pooled"], str(tmp_path / "model"))
    assert not os.path.exists(tmp_path / "model" / convert.SERVING_DIR)


def test_import_unconvertible_op_named_with_module_before_writing(tmp_path):
    # A TorchScript file keeps EmbeddingBag compiled: its ONNX form is a Loop.
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(50, 4, mode="sum"),
                                torch.nn.Linear(4, 1)).eval()
    specs = signature.parse_input_specs(["ids:int64:-1,5:0..49"])
    path = str(tmp_path / "bag.torchscript")
    torch.jit.trace(model, (torch.zeros(2, 5, dtype=torch.int64),)).save(path)
    with pytest.raises(ConversionError,
                       match=r"nothing was written\. ONNX op Loop \(node /0/Loop\w*, "
                             r"from module '0' \(EmbeddingBag\)\): .*--module-class"):
        convert.import_model(convert.ModelSource("torchscript", path), specs, ["score"],
                             str(tmp_path / "model"))
    assert not os.path.exists(tmp_path / "model" / convert.SERVING_DIR)


def test_import_torchscript_traced_with_fused_attention_refused_with_fix(tmp_path):
    model = zoo.TextEncoder().eval()
    specs = signature.parse_input_specs(zoo.ZOO["transformer_encoder"].inputs)
    sample = tuple(torch.from_numpy(v) for v in signature.make_inputs(specs, 2).values())
    path = str(tmp_path / "enc.torchscript")
    with torch.no_grad():  # eval + no_grad: PyTorch traces its fused fast path
        torch.jit.trace(model, sample).save(path)
    with pytest.raises(Exception, match=r"fused attention kernel aten::_transformer_encoder"
                                        r"_layer_fwd.*set_fastpath_enabled\(False\)"):
        convert.import_model(convert.ModelSource("torchscript", path), specs, ["logits"],
                             str(tmp_path / "model"))


@pytest.mark.slow
def test_cli_import_model_crashing_at_one_batch_size_is_not_equivalent_exit_1(tmp_path):
    """Without the graph rewrites onnx2tf's Flatten works at batch 1 only: a recorded verdict."""
    entry = zoo.ZOO["conv_pool_flatten"]
    model = entry.build()
    specs = signature.parse_input_specs(entry.inputs)
    onnx_path = str(tmp_path / "cnn.onnx")
    torch.onnx.export(model, (torch.zeros(2, 3, 16, 16),), onnx_path, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "b"}},
                      opset_version=17, dynamo=False)
    exe = os.path.join(os.path.dirname(sys.executable), "tfx-bridge")
    proc = subprocess.run([exe, "import-model", "--onnx", onnx_path, "--input",
                           specs[0].to_text(), "--output-name", "logits", "--output",
                           str(tmp_path / "out"), "--no-graph-rewrites", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["blessed"] is False
    report = json.load(open(tmp_path / "out" / convert.REPORT_JSON))
    by_batch = {}
    for c in report["checks"]:
        by_batch.setdefault(c["batch"], []).append(c)
    assert all(c["ok"] for c in by_batch[1])
    for batch in (7, 32):
        assert all(not c["ok"] and c["max_abs"] is None for c in by_batch[batch])
        assert "Matrix size-incompatible" in by_batch[batch][0]["error"]
    assert "Matrix size-incompatible" in proc.stdout  # the table shows the error
    assert report["rewrites"] == []
