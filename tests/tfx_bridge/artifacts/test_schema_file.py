"""tfx_bridge.artifacts.schema_file: a schema file or SchemaGen folder, refused by
name when it is neither."""
from __future__ import annotations

import pytest

from tfx_bridge.artifacts.schema_file import SCHEMA_FILE, SchemaFileError, load_schema

SCHEMA = 'feature { name: "age" type: INT }\nfeature { name: "score" type: FLOAT }\n'


def test_load_schema_file_gives_its_features(tmp_path):
    path = tmp_path / "my.schema.pbtxt"
    path.write_text(SCHEMA)
    schema = load_schema(str(path))
    assert [(f.name, f.type) for f in schema.feature] == [("age", 2), ("score", 3)]


def test_load_schema_folder_reads_its_schema_pbtxt(tmp_path):
    (tmp_path / SCHEMA_FILE).write_text(SCHEMA)
    assert [f.name for f in load_schema(str(tmp_path)).feature] == ["age", "score"]


def test_load_schema_folder_without_schema_refused(tmp_path):
    with pytest.raises(SchemaFileError, match=r"is a folder without schema\.pbtxt"):
        load_schema(str(tmp_path))


def test_load_schema_missing_file_refused(tmp_path):
    with pytest.raises(SchemaFileError, match=r"Cannot read schema .*nope\.pbtxt"):
        load_schema(str(tmp_path / "nope.pbtxt"))


def test_load_schema_not_text_refused(tmp_path):
    path = tmp_path / "s.pbtxt"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(SchemaFileError, match=r"s\.pbtxt is not text"):
        load_schema(str(path))


def test_load_schema_not_a_schema_proto_refused(tmp_path):
    path = tmp_path / "s.pbtxt"
    path.write_text('feature { name: "age" colour: RED }\n')
    with pytest.raises(SchemaFileError, match=r"s\.pbtxt is not a TFMD Schema text proto"):
        load_schema(str(path))
