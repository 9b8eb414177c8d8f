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
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")
pytest.importorskip("torchvision", reason="needs the [zoo] extra (torchvision)")
pytest.importorskip("transformers", reason="needs the [zoo] extra (transformers)")


from tfx_bridge.components.pytorch_model_importer import (  # noqa: E402
    convert,
    signature,
)
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.export import module_rewrites  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.onnx2tf import graph_rewrites  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.report import check_table  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.source import ModelSource  # noqa: E402

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
def test_zoo_rewrite_named_in_report(zoo_imports):
    zoo.assert_rewrite_named(zoo_imports["embedding_bag"], module_rewrites.EMBEDDING_BAG_DENSE)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.TESTED_A)
def test_zoo_model_converted_by_own_converter_without_graph_rewrites(zoo_imports, name):
    report = zoo_imports[name].report
    assert report["converter"] == "tfx-bridge"
    assert [a["converter"] for a in report["conversion_attempts"]] == ["tfx-bridge"]
    # onnx2tf's batch-1 reshape fix is not needed: dynamic dims stay tf.shape.
    assert graph_rewrites.RESHAPE_DYNAMIC_BATCH not in {r["kind"] for r in report["rewrites"]}


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
    dense = module_rewrites.DenseEmbeddingBag(bag, "bag")
    with torch.no_grad():
        want = bag(ids, per_sample_weights=weights)
        got = dense(ids, per_sample_weights=weights)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)


@pytest.mark.slow
def test_export_ragged_embedding_bag_converts_without_loop(tmp_path):
    """1-D ids + offsets: exported through fused.py's segment-id form (no Loop), converted
    by our converter, and equal to torch on ragged bags (one of them empty)."""
    import tensorflow as tf

    from tfx_bridge.components.pytorch_model_importer import to_tf
    from tfx_bridge.components.pytorch_model_importer.export import stage

    torch.manual_seed(0)
    module = zoo.RaggedBag().eval()
    # Offsets all 0 for the trace: valid bags whatever the batch size.
    specs = signature.parse_input_specs(["ids:int64:-1:0..99", "offsets:int64:-1:0..0"])
    onnx_path = str(tmp_path / "bag.onnx")
    rewrites = stage.export_onnx(module, specs, ["pooled"], onnx_path)
    # Not dense: ragged.
    assert module_rewrites.EMBEDDING_BAG_DENSE not in {r.kind for r in rewrites}
    assert "Loop" not in {n.op_type for n in onnx.load(onnx_path).graph.node}
    saved = to_tf.faithful(onnx_path, str(tmp_path / "sm"), specs)
    ids = torch.tensor([1, 2, 3, 4, 5, 6], dtype=torch.int64)
    for offsets in ([0, 2, 2, 5], [0, 3]):
        offsets = torch.tensor(offsets, dtype=torch.int64)
        got = tf.saved_model.load(saved).signatures["serving_default"](
            ids=tf.constant(ids.numpy()), offsets=tf.constant(offsets.numpy()))["pooled"]
        with torch.no_grad():
            np.testing.assert_allclose(got.numpy(), module(ids, offsets).numpy(), atol=1e-6)


@pytest.mark.slow
def test_import_torchscript_embedding_bag_decomposed_and_blessed(tmp_path):
    # A TorchScript file keeps aten::embedding_bag compiled; fused.py exports it as
    # gather + reduce (its stock ONNX form is a Loop).
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(50, 4, mode="sum"),
                                torch.nn.Linear(4, 1)).eval()
    path = str(tmp_path / "bag.torchscript")
    torch.jit.trace(model, (torch.zeros(2, 5, dtype=torch.int64),)).save(path)
    config = ImporterConfig.of_source(ModelSource("torchscript", path),
                                      ["ids:int64:-1,5:0..49"], ["score"])
    result = convert.import_model(config, str(tmp_path / "model"))
    assert result.blessed, check_table(result.report["checks"])
    kinds = {r["kind"]: r["nodes"] for r in result.report["rewrites"]}
    assert kinds["fused-kernel-decomposed"] == ["0 (aten::embedding_bag)"]


@pytest.mark.slow
def test_import_torchscript_traced_with_fused_attention_blessed(tmp_path):
    model = zoo.TextEncoder().eval()
    specs = signature.parse_input_specs(zoo.ZOO["transformer_encoder"].inputs)
    sample = tuple(torch.from_numpy(v) for v in signature.make_inputs(specs, 2).values())
    path = str(tmp_path / "enc.torchscript")
    with torch.no_grad():  # eval + no_grad: PyTorch traces its fused fast path
        torch.jit.trace(model, sample).save(path)
    config = ImporterConfig.of_source(ModelSource("torchscript", path),
                                      zoo.ZOO["transformer_encoder"].inputs, ["logits"])
    result = convert.import_model(config, str(tmp_path / "model"))
    assert result.blessed, check_table(result.report["checks"])
    rewrites = {r["kind"]: r["nodes"] for r in result.report["rewrites"]}
    assert any("aten::_transformer_encoder_layer_fwd" in n
               for n in rewrites["fused-kernel-decomposed"])
    # The fast-path switch changes nothing once traced.
    assert module_rewrites.MHA_FASTPATH_OFF not in rewrites
    assert result.report["converter"] == "tfx-bridge"


@pytest.mark.slow
def test_cli_import_model_crashing_at_one_batch_size_is_not_equivalent_exit_1(tmp_path,
                                                                            capfd):
    """Without the graph rewrites onnx2tf's Flatten works at batch 1 only: a recorded verdict."""
    entry = zoo.ZOO["conv_pool_flatten"]
    model = entry.build()
    specs = signature.parse_input_specs(entry.inputs)
    onnx_path = str(tmp_path / "cnn.onnx")
    torch.onnx.export(model, (torch.zeros(2, 3, 16, 16),), onnx_path, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "b"}},
                      opset_version=17, dynamo=False)
    from tfx_bridge import cli

    code = cli.main(["import-model", "--onnx", onnx_path, "--input", specs[0].to_text(),
                     "--output-name", "logits", "--output", str(tmp_path / "out"),
                     "--converter", "onnx2tf", "--no-graph-rewrites", "--json"])
    stdout, stderr = capfd.readouterr()
    assert code == 1, stderr[-2000:]
    assert "Traceback" not in stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["blessed"] is False
    report = json.load(open(tmp_path / "out" / convert.REPORT_JSON))
    by_batch = {}
    for c in report["checks"]:
        by_batch.setdefault(c["batch"], []).append(c)
    assert all(c["ok"] for c in by_batch[1])
    for batch in (7, 32):
        assert all(not c["ok"] and c["max_abs"] is None for c in by_batch[batch])
        assert "Matrix size-incompatible" in by_batch[batch][0]["error"]
    assert "Matrix size-incompatible" in stdout  # the table shows the error
    assert report["rewrites"] == [] and report["converter"] == "onnx2tf"
