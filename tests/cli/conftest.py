"""What the route tests (a verb's CLI output against its component's) share."""
from __future__ import annotations

import pytest

from tfx_bridge.storage import fs


@pytest.fixture
def file_tree():
    """``tree(root)``: relative path (``/``-separated) -> bytes of every file under root."""

    def tree(root: str) -> dict:
        return {rel: fs.read_bytes(fs.join(root, rel)) for rel in fs.files_under(root)}

    return tree


@pytest.fixture
def component_model(tmp_path):
    """``run(source, component)``: the two in a local pipeline under tmp_path; the
    Model artifact ``component`` wrote."""

    def run(source, component):
        from tfx import v1 as tfx

        from tfx_bridge.pipelines import runner

        metadata = str(tmp_path / "m.sqlite")
        runner.run_local(tfx.dsl.Pipeline(
            pipeline_name="route", pipeline_root=str(tmp_path / "root"),
            components=[source, component],
            metadata_connection_config=(
                tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata))))
        return [m for m in runner.latest_artifacts(metadata, "Model")
                if f"/{component.id}/" in m.uri][0]

    return run
