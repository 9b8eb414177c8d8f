"""tfx_bridge.pipelines.inputs: inputs from outside the pipeline root are known by
content, so a changed file under the same path is never served stale."""
from __future__ import annotations

import json
import os

import pytest

from tfx_bridge import schemas
from tfx_bridge.pipelines import inputs
from tfx_bridge.pipelines import pipeline as pipelines


def _folder(path, weights: bytes):
    path.mkdir(exist_ok=True)
    (path / "weights.pt").write_bytes(weights)
    (path / "spec.json").write_text("{}")
    return str(path)


def _run_importer(tmp_path, source: str, run: int) -> int:
    """The Importer alone through LocalDagRunner and a real MLMD: its artifact's id."""
    from tfx import v1 as tfx
    from tfx.orchestration import metadata

    node = inputs.content_importer(source, tfx.types.standard_artifacts.Model, "research_model")
    db = str(tmp_path / "mlmd.sqlite")
    tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
        pipeline_name="inputs", pipeline_root=str(tmp_path / "root"), components=[node],
        metadata_connection_config=metadata.sqlite_metadata_connection_config(db),
        enable_cache=True))
    with metadata.Metadata(metadata.sqlite_metadata_connection_config(db)) as m:
        models = m.store.get_artifacts_by_type("Model")
    return max(a.id for a in models), len(models)


def test_content_importer_changed_byte_new_artifact_unchanged_same_artifact(tmp_path):
    source = _folder(tmp_path / "research", b"\x00" * 64)
    first, _ = _run_importer(tmp_path, source, 1)
    same, count = _run_importer(tmp_path, source, 2)
    assert (same, count) == (first, 1)  # the same content: the same artifact, cached
    _folder(tmp_path / "research", b"\x00" * 63 + b"\x01")  # one value differs, same size
    changed, count = _run_importer(tmp_path, source, 3)
    assert changed != first and count == 2


def test_content_importer_relative_source_absolute_and_missing_refused_naming_it(
        tmp_path, monkeypatch):
    from tfx import v1 as tfx

    _folder(tmp_path / "research", b"w")
    monkeypatch.chdir(tmp_path)
    node = inputs.content_importer("research", tfx.types.standard_artifacts.Model, "m")
    assert node.exec_properties["artifact_uri"] == str(tmp_path / "research")
    with pytest.raises(FileNotFoundError, match="gone does not exist"):
        inputs.content_importer("gone", tfx.types.standard_artifacts.Model, "m")


def test_pinned_file_path_follows_content_not_name(tmp_path):
    schema = tmp_path / "my.schema.pbtxt"
    schema.write_text("feature { name: 'a' }")
    root = str(tmp_path / "root")
    first = inputs.pinned_file(str(schema), root)
    assert first.startswith(os.path.join(root, inputs.INPUTS_DIR)) and \
        first.endswith("/my.schema.pbtxt")
    assert inputs.pinned_file(str(schema), root) == first
    schema.write_text("feature { name: 'b' }")
    second = inputs.pinned_file(str(schema), root)
    assert second != first and open(second).read() == "feature { name: 'b' }"
    assert open(first).read() == "feature { name: 'a' }"  # an earlier run's stays as it was
    with pytest.raises(FileNotFoundError, match="is not a file"):
        inputs.pinned_file(str(tmp_path), root)


def test_create_pipeline_relative_paths_absolute_and_schema_read_by_content(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = pipelines.create_pipeline(
        "t", "root", "data", None, "serving", schema_path=schemas.path(schemas.DEMO_SCHEMA),
        contract_path=schemas.path(schemas.DEMO_CONTRACT),
        preprocessing_module=pipelines.DEMO_PREPROCESSING,
        trainer_module=pipelines.DEMO_TRAINER)
    by_id = {c.id: c for c in p.components}
    assert by_id["ParquetExampleGen"].exec_properties["input_base"] == str(tmp_path / "data")
    assert p.pipeline_info.pipeline_root == str(tmp_path / "root")
    pinned = os.path.join(str(tmp_path / "root"), inputs.INPUTS_DIR)
    assert by_id["ImportSchemaGen"].exec_properties["schema_file"].startswith(pinned)
    guard = json.loads(by_id["SchemaGuard"].exec_properties["config"])
    assert guard["contract_path"].startswith(pinned)


def test_create_pipeline_compiled_once_nothing_hashed_paths_as_given(tmp_path):
    p = pipelines.create_pipeline(
        "t", "gs://b/root", "gs://b/data", "gs://b/research", "s3://b/serving",
        schema_path="gs://b/s.pbtxt", content_identity=False,
        module_class="tfx_bridge.pipelines.demo_models:CtrModel")
    by_id = {c.id: c for c in p.components}
    assert by_id["ImportSchemaGen"].exec_properties["schema_file"] == "gs://b/s.pbtxt"
    assert by_id["research_model"].exec_properties["artifact_uri"] == "gs://b/research"
