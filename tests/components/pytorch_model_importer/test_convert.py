"""PyTorchModelImporter's core on five reference architectures, and its refusals."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")

import tensorflow as tf  # noqa: E402

from tfx_bridge.artifacts.tensorspec import TensorSpecError  # noqa: E402
from tfx_bridge.components.pytorch_model_importer import convert, signature  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.errors import (  # noqa: E402
    ImporterConfigError,
    ModelSourceError,
)
from tfx_bridge.components.pytorch_model_importer.report import check_table  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.source import (  # noqa: E402
    ModelSource,
    check_external_data,
    load_torch_module,
)
from tfx_bridge.components.pytorch_model_importer.verify import verify  # noqa: E402
from tfx_bridge.pipelines import demo_models  # noqa: E402


@pytest.fixture(scope="module")
def imported(reference_imports):
    """Every reference model imported once per session (conftest.reference_imports)."""
    return reference_imports


@pytest.mark.slow
@pytest.mark.parametrize("name", list(demo_models.REFERENCE_MODELS))
def test_import_reference_model_equivalent_at_three_batch_sizes(imported, reference_handover,
                                                                name):
    result = imported[name]
    assert result.blessed, check_table(result.report["checks"])
    checks = result.report["checks"]
    assert {c["batch"] for c in checks} == {1, 7, 32}
    _, _, _, outputs = demo_models.REFERENCE_MODELS[name]
    refs = {"onnxruntime"} | ({"torch"} if reference_handover.kinds[name] != "onnx" else set())
    for batch in (1, 7, 32):
        for out in outputs:
            for ref in refs:
                c = next(c for c in checks if (c["batch"], c["output"], c["reference"]) ==
                         (batch, out, ref))
                if c["dtype"].startswith("int"):
                    assert c["mismatches"] == 0 and c["max_abs"] == 0 and c["scale"] is None
                else:  # the error is read against the reference's largest value
                    assert c["max_abs"] <= 1e-4 and c["scale"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", list(demo_models.REFERENCE_MODELS))
def test_import_signature_names_dtypes_shapes_preserved(imported, name):
    _, _, inputs, outputs = demo_models.REFERENCE_MODELS[name]
    loaded = tf.saved_model.load(imported[name].serving_dir)
    fn = loaded.signatures["serving_default"]
    got = {k: (v.dtype.name, tuple(v.shape.as_list()))
           for k, v in fn.structured_input_signature[1].items()}
    want = {s.name: (s.dtype, tuple(None if d < 0 else d for d in s.shape))
            for s in signature.parse_input_specs(inputs)}
    assert got == want  # NCHW stays NCHW: no silent NHWC
    assert sorted(fn.structured_outputs) == sorted(outputs)
    ex = loaded.signatures["serving_tf_example"].structured_input_signature[1]
    assert {k: v.dtype.name for k, v in ex.items()} == {"examples": "string"}


@pytest.mark.slow
def test_import_moe_indices_int64_exact(imported):
    loaded = tf.saved_model.load(imported["moe"].serving_dir)
    x = np.random.default_rng(3).uniform(-1, 1, (32, 16)).astype(np.float32)
    got = loaded.signatures["serving_default"](x=tf.constant(x))
    model = demo_models.build("moe")
    with torch.no_grad():
        score, experts = model(torch.from_numpy(x))
    assert got["experts"].dtype == tf.int64
    np.testing.assert_array_equal(got["experts"].numpy(), experts.numpy())
    np.testing.assert_allclose(got["score"].numpy(), score.numpy(), atol=1e-5)


@pytest.mark.slow
def test_import_report_written(imported):
    folder = os.path.dirname(imported["mlp"].serving_dir)
    with open(os.path.join(folder, convert.REPORT_JSON)) as f:
        report = json.load(f)
    assert report["blessed"] is True and report["outputs"] == ["logits"]
    assert "| batch | output | vs |" in open(os.path.join(folder, convert.REPORT_MD)).read()
    assert not [p for p in os.listdir(imported["mlp"].serving_dir) if p.endswith(".tflite")]


@pytest.mark.slow
def test_import_tampered_onnx_weight_not_blessed(tmp_path, reference_handover):
    from onnx import numpy_helper

    def tamper(path):
        model = onnx.load(path)
        init = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
        w = numpy_helper.to_array(init).copy()
        w.flat[0] += 0.5
        init.CopyFrom(numpy_helper.from_array(w, init.name))
        onnx.save(model, path)

    _, _, inputs, outputs = demo_models.REFERENCE_MODELS["mlp"]
    config = ImporterConfig.of_source(reference_handover("mlp", str(tmp_path)), inputs, outputs)
    result = convert.import_model(config, str(tmp_path / "model"), tamper_onnx=tamper)
    assert not result.blessed
    torch_checks = [c for c in result.report["checks"] if c["reference"] == "torch"]
    # A ReLU can mask one weight for some inputs; the gate needs just one miss.
    assert torch_checks and not all(c["ok"] for c in torch_checks)
    # onnxruntime runs the ONNX as exported (before rewrites), so it sees the tamper too.
    ort_checks = [c for c in result.report["checks"] if c["reference"] == "onnxruntime"]
    assert ort_checks and not all(c["ok"] for c in ort_checks)


def test_state_dict_pickled_code_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(2), "obj": demo_models.MLP()}, str(path))
    source = ModelSource("state_dict", str(path),
                         "tfx_bridge.pipelines.demo_models:MLP", {})
    with pytest.raises(ModelSourceError, match=r"not a plain state_dict.*weights_only=True"):
        load_torch_module(source)


def test_state_dict_wrong_keys_refused(tmp_path):
    path = tmp_path / "w.pt"
    torch.save(demo_models.build("mlp").state_dict(), str(path))
    source = ModelSource("state_dict", str(path),
                         "tfx_bridge.pipelines.demo_models:TopKMoE", {})
    with pytest.raises(ModelSourceError, match=r"does not fit .*TopKMoE: missing keys"):
        load_torch_module(source)


def test_onnx_external_data_outside_folder_refused(tmp_path):
    from onnx import TensorProto, helper
    weight = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    weight.data_location = TensorProto.EXTERNAL
    del weight.float_data[:]
    entry = weight.external_data.add()
    entry.key, entry.value = "location", "../../etc/secret.bin"
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                              [weight])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(ModelSourceError, match=r"external data outside the model's folder"):
        check_external_data(str(path))


@pytest.mark.parametrize("text,match", [
    ("x:float32", r"expected name:dtype:shape"),
    ("x:complex64:-1", r"dtype 'complex64' is not one of"),
    ("x:float32:3,8", r"first dimension is the batch and must be -1"),
    ("x:int64:-1:9..1", r"range low 9.0 > high 1.0"),
])
def test_input_spec_bad_text_refused(text, match):
    with pytest.raises(TensorSpecError, match=match):
        signature.parse_input_spec(text)


def test_module_class_not_importable_refused(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({}, str(path))
    source = ModelSource("state_dict", str(path), "no_such_pkg.mod:Net", {})
    with pytest.raises(ImporterConfigError, match=r"cannot import it"):
        load_torch_module(source)


def test_module_class_not_an_nn_module_refused_before_call(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({}, str(path))
    marker = tmp_path / "ran"
    source = ModelSource("state_dict", str(path), "os:system",
                         {"command": f"touch {marker}"})
    with pytest.raises(ImporterConfigError,
                       match=r"'os:system' is builtin_function_or_method 'system', not a "
                             r"torch.nn.Module subclass"):
        load_torch_module(source)
    assert not marker.exists()  # nothing was called


@pytest.mark.parametrize("via", ["dotdot", "symlink"])
def test_onnx_constant_node_external_data_outside_folder_refused(tmp_path, via):
    """A Constant node's tensor is checked like an initializer, through symlinks too."""
    from onnx import TensorProto, helper

    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.float32(42.0).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    if via == "symlink":
        os.symlink(secret, folder / "link.bin")
        location = "link.bin"
    else:
        location = "../secret.bin"
    value = helper.make_tensor("c", TensorProto.FLOAT, [1], [0.0])
    del value.float_data[:]
    value.data_location = TensorProto.EXTERNAL
    entry = value.external_data.add()
    entry.key, entry.value = "location", location
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=value),
         helper.make_node("Add", ["x", "c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])])
    path = str(folder / "m.onnx")
    onnx.save(helper.make_model(graph), path)
    with pytest.raises(ModelSourceError,
                       match=rf"external data outside the model's folder \('c' -> '{location}'"):
        convert.import_model(ImporterConfig.of_source(ModelSource("onnx", path),
                                                      ["x:float32:-1,1"], ["y"]),
                             str(tmp_path / "out"))
    assert not (tmp_path / "out" / convert.SERVING_DIR).exists()


@pytest.mark.slow
def test_verify_onnxruntime_unavailable_torch_decides(imported, tmp_path):
    """onnxruntime failing on the exported ONNX is recorded, not held against the
    SavedModel when torch (the source) was checked; without torch it is a failure."""
    serving_dir = imported["mlp"].serving_dir
    specs = signature.parse_input_specs(demo_models.REFERENCE_MODELS["mlp"][2])
    outputs = demo_models.REFERENCE_MODELS["mlp"][3]
    missing = str(tmp_path / "no-such.onnx")
    module = demo_models.build("mlp").eval()  # the weights the import was made from
    checks = verify(serving_dir, missing, specs, outputs, module, batch_sizes=(1,))
    ort_checks = [c for c in checks if c.reference == "onnxruntime"]
    assert ort_checks and all(c.ok and c.error.startswith("reference unavailable")
                              for c in ort_checks)
    assert all(c.ok for c in checks if c.reference == "torch")
    alone = verify(serving_dir, missing, specs, outputs, None, batch_sizes=(1,))
    assert not any(c.ok for c in alone if c.reference == "onnxruntime")


def test_verify_nchw_only_graph_fails_in_serving_process(tmp_path):
    """The check runs on TF's own CPU kernels (oneDNN off), even in a warm worker that
    verified other models before: an NCHW Conv2D (on CPU, only oneDNN runs it) fails there."""
    class Nchw(tf.Module):
        def __init__(self):
            super().__init__()
            self.kernel = tf.Variable(tf.ones([3, 3, 2, 4]))

        @tf.function(input_signature=[tf.TensorSpec([None, 2, 8, 8], tf.float32, "image")])
        def serve(self, image):
            return {"y": tf.nn.conv2d(image, self.kernel, 1, "SAME", data_format="NCHW")}

    folder = str(tmp_path / "nchw")
    module = Nchw()
    tf.saved_model.save(module, folder, signatures={"serving_default": module.serve})
    specs = signature.parse_input_specs(["image:float32:-1,2,8,8"])
    feeds = {1: signature.make_inputs(specs, 1)}
    from tfx_bridge.components.pytorch_model_importer import verify

    for _ in range(2):  # the second run reuses the warm worker
        served = verify.serve_fresh(folder, feeds, specs, ["y"], via_batch=None)
        assert isinstance(served["1"], str) and "NHWC" in served["1"], served["1"]


@pytest.mark.parametrize("mix_rows", [False])  # True: export/test_stage.py's FrozenBatchMixingRows
def test_import_batch_frozen_model_served_row_wise_only_when_rows_verify(tmp_path, mix_rows,
                                                                         zoo_imports):
    """A graph right at the export batch only is re-exported for one row and served
    row by row (rows that read each other fail that check: export/test_stage.py)."""
    from zoo import BatchLoop  # importable: the zoo_imports fixture put zoo on sys.path

    torch.manual_seed(0)
    path = tmp_path / "loop.pt"
    torch.save(BatchLoop(mix_rows).state_dict(), path)
    config = ImporterConfig(source_kind="state_dict", source_path=str(path),
                            module_class="zoo:BatchLoop", module_kwargs={"mix_rows": mix_rows},
                            inputs=["x:float32:-1,4"], output_names=["y"])
    result = convert.import_model(config, str(tmp_path / "model"))
    kinds = [r["kind"] for r in result.report["rewrites"]]
    assert result.blessed == (not mix_rows)
    assert (convert.ROW_WISE_SERVING in kinds) == (not mix_rows)
    if not mix_rows:
        assert result.report["row_wise_retry_after_s"] > 0
        serve = tf.saved_model.load(result.serving_dir).signatures["serving_default"]
        x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
        module = BatchLoop()
        module.load_state_dict(torch.load(path))
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(serve(x=tf.constant(x))["y"].numpy(), want, atol=1e-5)


def test_import_batch_frozen_model_rejecting_one_row_keeps_first_attempt_not_blessed(
        tmp_path, zoo_imports):
    """The one-row retry of a graph frozen at the export batch cannot export (the model
    refuses a batch of 1): the import still completes with the first attempt, not
    blessed, instead of being refused for the retry's failure."""
    from zoo_models import PairedBatchLoop

    torch.manual_seed(0)
    path = tmp_path / "pairs.pt"
    torch.save(PairedBatchLoop().state_dict(), path)
    config = ImporterConfig(source_kind="state_dict", source_path=str(path),
                            module_class="zoo_models:PairedBatchLoop",
                            inputs=["x:float32:-1,4"], output_names=["y"])
    result = convert.import_model(config, str(tmp_path / "model"))
    assert not result.blessed
    assert convert.ROW_WISE_SERVING not in [r["kind"] for r in result.report["rewrites"]]
    assert result.report["row_wise_retry_after_s"] is None
    at_export = [c for c in result.report["checks"]
                 if c["reference"] == "torch" and c["batch"] == 32]
    assert at_export and all(c["ok"] for c in at_export)
    from tfx_bridge.components.pytorch_model_importer import report

    assert report.likely_cause(result.report).startswith(
        "torch itself raises on the check inputs at batch size(s) [1, 7]: ValueError: "
        "frames come in pairs")
