"""What a pipeline reads from outside its root, named so MLMD never serves it stale.

TFX decides "nothing changed" from what MLMD keeps: an Importer reuses the artifact
of an earlier run with the same URI and properties (``reimport=False``), and a
component whose execution properties are unchanged is cached. Both see a path,
not its content, so a research team's ``weights.pt`` replaced under the same
folder, or a schema edited in place, would be served stale. Here:

- a hand-over folder (the model, the Transform graph) is imported with its
  content digest as a custom property: a changed file is a new artifact (and
  every step downstream runs again), an unchanged one the same artifact;
- a file a component reads by path (the curated schema, SchemaGuard's contract)
  is given as a copy under ``<pipeline root>/_inputs/<digest>/``: a changed file
  is a changed path;
- a local path is absolute: MLMD keeps it as written, so ``data`` and
  ``$PWD/data`` would otherwise be two inputs.

Under Kubeflow the spec is compiled once and run many times, so nothing is
hashed at compile time there (``content_identity=False``): hand each model
version over under its own URI.
"""
from __future__ import annotations

import os
import uuid
from typing import Optional

from tfx_bridge.storage import fs

CONTENT_PROPERTY = "content_digest"
INPUTS_DIR = "_inputs"


def absolute(path: Optional[str]) -> Optional[str]:
    """A local path made absolute; a URI (``s3://``, ``gs://``) or None as given.

    >>> import os
    >>> absolute("data") == os.path.join(os.getcwd(), "data")
    True
    >>> absolute("s3://bucket/data")
    's3://bucket/data'
    """
    if path is None or fs.is_remote(path):
        return path
    return os.path.abspath(path)


def content_importer(source_uri: str, artifact_type, node_id: str,
                     content_identity: bool = True):
    """A TFX Importer of ``source_uri`` whose artifact is the same only while the
    content is (the digest is a custom property the Importer matches on)."""
    from tfx import v1 as tfx

    source_uri = absolute(source_uri)
    if content_identity and not fs.exists(source_uri):
        raise FileNotFoundError(f"{source_uri} does not exist: give the folder the "
                                f"{node_id.replace('_', ' ')} is handed over in.")
    properties = {CONTENT_PROPERTY: fs.content_digest(source_uri)} if content_identity else None
    return tfx.dsl.Importer(source_uri=source_uri, artifact_type=artifact_type,
                            custom_properties=properties).with_id(node_id)


def pinned_file(path: str, pipeline_root: str) -> str:
    """``path``'s copy under ``<pipeline_root>/_inputs/<digest>/<name>``, written once
    (locally a temp name, then a rename, so a reader never sees half a file; an
    object store's put is whole already)."""
    path = absolute(path)
    if not fs.isfile(path):
        raise FileNotFoundError(f"{path} is not a file: give the schema or contract file "
                                "the pipeline reads.")
    folder = fs.join(absolute(pipeline_root), INPUTS_DIR, fs.content_digest(path))
    target = fs.join(folder, fs.basename(path))
    if fs.exists(target):
        return target
    fs.makedirs(folder)
    if fs.is_remote(target):
        fs.copy(path, target)
        return target
    partial = fs.join(folder, f".{fs.basename(path)}.{uuid.uuid4().hex}.partial")
    fs.copy(path, partial)
    fs.rename(partial, target, overwrite=True)
    return target
