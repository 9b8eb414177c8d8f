"""The importer's source digest (the pusher's "same model" identity) follows
content: the same tensors, ONNX weights and Transform graph give the same digest
whichever run wrote the files; any change in them gives another."""
from __future__ import annotations

import os
import shutil

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
onnx = pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")

from onnx import helper, numpy_helper  # noqa: E402

from tfx_bridge.components.pytorch_model_importer.digest import source_digest  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.source import (  # noqa: E402
    SOURCE_ONNX,
    SOURCE_STATE_DICT,
    ModelSource,
)


def _digest(source, transform_dir=None):
    return source_digest(source, ["x:float32:-1,3"], ["y"], {"opset": 17}, transform_dir)


def _state_dict_source(path):
    return ModelSource(SOURCE_STATE_DICT, str(path), "torch.nn:Linear",
                       {"in_features": 3, "out_features": 2})


def test_source_digest_state_dict_same_tensors_other_bytes_same_digest(tmp_path):
    weights = torch.nn.Linear(3, 2).state_dict()
    torch.save(weights, tmp_path / "a.pt")
    # Another writer: keys in another order, the legacy (non-zip) format.
    torch.save(dict(reversed(list(weights.items()))), tmp_path / "b.pt",
               _use_new_zipfile_serialization=False)
    assert (tmp_path / "a.pt").read_bytes() != (tmp_path / "b.pt").read_bytes()
    assert _digest(_state_dict_source(tmp_path / "a.pt")) == \
        _digest(_state_dict_source(tmp_path / "b.pt"))
    changed = {k: v.clone() for k, v in weights.items()}
    changed["bias"][0] += 1e-6
    torch.save(changed, tmp_path / "c.pt")
    assert _digest(_state_dict_source(tmp_path / "c.pt")) != \
        _digest(_state_dict_source(tmp_path / "a.pt"))


def test_source_digest_file_that_is_not_tensors_hashed_as_bytes(tmp_path):
    (tmp_path / "a.pt").write_bytes(b"not a torch file")
    (tmp_path / "b.pt").write_bytes(b"not a torch file!")
    assert _digest(_state_dict_source(tmp_path / "a.pt")) != \
        _digest(_state_dict_source(tmp_path / "b.pt"))


def _onnx_with_external_weight(folder, value: float) -> str:
    import numpy as np

    os.makedirs(folder, exist_ok=True)
    weight = numpy_helper.from_array(np.full((3, 2), value, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None, 2])], [weight])
    path = os.path.join(folder, "m.onnx")
    onnx.save(helper.make_model(graph), path, save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    return path


def test_source_digest_onnx_external_weights_changed_other_digest(tmp_path):
    a = _onnx_with_external_weight(tmp_path / "a", 1.0)
    b = _onnx_with_external_weight(tmp_path / "b", 2.0)
    # The .onnx files are byte-identical: only the external data differs.
    assert (tmp_path / "a" / "m.onnx").read_bytes() == (tmp_path / "b" / "m.onnx").read_bytes()
    assert _digest(ModelSource(SOURCE_ONNX, a)) != _digest(ModelSource(SOURCE_ONNX, b))
    again = _onnx_with_external_weight(tmp_path / "c", 1.0)
    assert _digest(ModelSource(SOURCE_ONNX, a)) == _digest(ModelSource(SOURCE_ONNX, again))


def _transform_graph(root, vocabulary: str) -> str:
    """A Transform-graph-shaped folder as TFT writes it: the lookup table is named
    after the vocabulary file in the run's own temp folder."""
    import tensorflow as tf

    graph = os.path.join(root, "transform_graph")
    temp = os.path.join(graph, ".temp_path", "tftransform_tmp")
    os.makedirs(temp)
    with open(os.path.join(temp, "country"), "w") as f:
        f.write(vocabulary)
    table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
        os.path.join(temp, "country"), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
        tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), -1)
    module = tf.Module()
    module.table = table
    module.lookup = tf.function(lambda x: table.lookup(x),
                                input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, os.path.join(graph, "transform_fn"))
    shutil.rmtree(os.path.join(graph, ".temp_path"))  # as TFT leaves it
    return graph


def _as_written_by_another_run(graph: str, root) -> str:
    """``graph`` as a run in another folder writes it. Measured on two demo runs:
    their transform_fn/saved_model.pb differ only in that run's temp path (the
    functions' names are the same in fresh processes), and fingerprint.pb with it."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    other = os.path.join(root, "transform_graph")
    shutil.copytree(graph, other)
    pb = os.path.join(other, "transform_fn", "saved_model.pb")
    proto = saved_model_pb2.SavedModel()
    with open(pb, "rb") as f:
        proto.ParseFromString(f.read())
    text = text_format.MessageToString(proto).replace(graph, other)
    with open(pb, "wb") as f:
        f.write(text_format.Parse(text, saved_model_pb2.SavedModel()).SerializeToString())
    with open(os.path.join(other, "transform_fn", "fingerprint.pb"), "ab") as f:
        f.write(b"\x08\x01")
    return other


def test_source_digest_transform_graph_of_another_run_same_digest_other_vocab_not(tmp_path):
    torch.save(torch.nn.Linear(3, 2).state_dict(), tmp_path / "w.pt")
    source = _state_dict_source(tmp_path / "w.pt")
    first = _transform_graph(tmp_path / "run-6", "us\nfr\n")
    second = _as_written_by_another_run(first, tmp_path / "run-12")
    pb = os.path.join("transform_fn", "saved_model.pb")
    with open(os.path.join(first, pb), "rb") as a, open(os.path.join(second, pb), "rb") as b:
        assert a.read() != b.read()  # the temp paths differ, and so do their lengths
    assert _digest(source, first) == _digest(source, second)
    other = _as_written_by_another_run(first, tmp_path / "run-13")
    with open(os.path.join(other, "transform_fn", "assets", "country"), "a") as f:
        f.write("de\n")  # another vocabulary
    assert _digest(source, other) != _digest(source, first)


# A value other than the default for every setting the digest takes from the config.
_CHANGED_SETTINGS = {"opset": 18, "atol": 1e-3, "rtol": 1e-3, "converter": "onnx2tf",
                     "graph_rewrites": False, "task": "detection", "max_detections": 5}


def test_digest_settings_every_config_field_in_exactly_one_group():
    import dataclasses

    from tfx_bridge.components.pytorch_model_importer import digest
    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig

    groups = digest.DIGEST_SETTINGS + digest.RESOLVED_FIELDS + digest.NOT_HASHED
    assert len(groups) == len(set(groups))
    assert sorted(groups) == sorted(f.name for f in dataclasses.fields(ImporterConfig))
    assert sorted(_CHANGED_SETTINGS) == sorted(digest.DIGEST_SETTINGS)


@pytest.mark.parametrize("name", sorted(_CHANGED_SETTINGS))
def test_source_digest_config_setting_changed_other_digest(tmp_path, name):
    import dataclasses

    from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
    from tfx_bridge.components.pytorch_model_importer.digest import digest_settings

    torch.save(torch.nn.Linear(3, 2).state_dict(), tmp_path / "w.pt")
    source = _state_dict_source(tmp_path / "w.pt")
    config = ImporterConfig()
    changed = dataclasses.replace(config, **{name: _CHANGED_SETTINGS[name]})
    assert getattr(changed, name) != getattr(config, name)
    digests = [source_digest(source, ["x:float32:-1,3"], ["y"], digest_settings(c), None)
               for c in (config, changed)]
    assert digests[0] != digests[1]


@pytest.mark.parametrize("field", ["module_class", "module_kwargs", "inputs", "outputs"])
def test_source_digest_resolved_module_or_signature_changed_other_digest(tmp_path, field):
    torch.save(torch.nn.Linear(3, 2).state_dict(), tmp_path / "w.pt")
    source = _state_dict_source(tmp_path / "w.pt")
    inputs, outputs = ["x:float32:-1,3"], ["y"]
    if field == "module_class":
        other = ModelSource(SOURCE_STATE_DICT, source.path, "torch.nn:LazyLinear",
                            source.module_kwargs)
    elif field == "module_kwargs":
        other = ModelSource(SOURCE_STATE_DICT, source.path, source.module_class,
                            {"in_features": 3, "out_features": 2, "bias": True})
    else:
        other = source
    changed = (["x:float32:-1,3:0..1"] if field == "inputs" else inputs,
               ["z"] if field == "outputs" else outputs)
    assert source_digest(source, inputs, outputs, {"opset": 17}, None) != \
        source_digest(other, *changed, {"opset": 17}, None)
