"""Reading a TFMD Schema: a text proto file, or a SchemaGen/ImportSchemaGen artifact folder.

Shared by SchemaGuard and the importer (the tf.Example parse contract). No TFX
imports; the path may be a URI (tf.io.gfile).
"""
from __future__ import annotations

from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs

SCHEMA_FILE = "schema.pbtxt"


class SchemaFileError(BridgeError):
    """A schema path that is missing or not a TFMD Schema text proto."""


def load_schema(path: str):
    """The Schema at ``path``; a folder means its schema.pbtxt (SchemaGen's layout)."""
    import tensorflow as tf
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    if fs.isdir(path):
        if not fs.exists(fs.join(path, SCHEMA_FILE)):
            raise SchemaFileError(
                f"Schema {path} is a folder without {SCHEMA_FILE}: give a schema file (e.g. "
                "schemas/demo.schema.pbtxt) or a SchemaGen output folder.")
        path = fs.join(path, SCHEMA_FILE)
    try:
        return text_format.Parse(fs.read_text(path), schema_pb2.Schema())
    except tf.errors.OpError as e:
        raise SchemaFileError(f"Cannot read schema {path}: {e.message}.") from e
    except OSError as e:
        raise SchemaFileError(f"Cannot read schema {path}: {e}.") from e
    except UnicodeDecodeError as e:
        raise SchemaFileError(f"Schema {path} is not text ({e.reason} at byte {e.start}): give "
                    "SchemaGen's schema.pbtxt or a file in schemas/.") from e
    except text_format.ParseError as e:
        raise SchemaFileError(
            f"Schema {path} is not a TFMD Schema text proto: {e}. Give SchemaGen's "
            "schema.pbtxt or a file in schemas/.") from e
