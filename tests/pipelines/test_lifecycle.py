"""Scheduled retraining, proven locally: spans arrive, models are retrained, bad data stops.

span 1 -> version 1; the same run again -> cached, no new version; span 2 (and
a model retrained on it) -> version 2; span 3 with an int32/int64 mismatch ->
stopped at SchemaGuard, version 2 still served and loadable. The Evaluator
gate is left out here to keep the test short (it is covered in the importer's
pipeline test and by `tfx-bridge demo`).
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402
from ml_metadata.proto import metadata_store_pb2  # noqa: E402
from tfx import v1 as tfx  # noqa: E402
from tfx.orchestration import metadata as tfx_metadata  # noqa: E402

from tfx_bridge.components.schema_guard.errors import AnomaliesFound  # noqa: E402
from tfx_bridge.components.serving_pusher import serving  # noqa: E402
from tfx_bridge.pipelines import demo_data, runner, train_demo_model  # noqa: E402

# The optimizer's timing rounds are not what this test is about.
FAST = {"optimizer_iterations": 10}


def _span(data: str, span: int, rows: int = 300) -> str:
    return demo_data.write_demo_spans(data, spans=[span], rows_per_span=rows)[0]


def _planted_span(data: str, span: int) -> None:
    table = demo_data.make_span_table(span, 300)
    item = np.asarray(table.column("item_id")).astype(np.int64)
    item[[3, 200]] = 3_000_000_000  # int64 at the source, consumed as int32
    table = table.set_column(table.schema.get_field_index("item_id"), "item_id",
                             pa.array(item, pa.int64()))
    folder = os.path.join(data, f"span-{span}")
    os.makedirs(folder)
    pq.write_table(table, os.path.join(folder, "part-0.parquet"))


def _executions(workdir: str):
    config = tfx.orchestration.metadata.sqlite_metadata_connection_config(
        os.path.join(workdir, runner.METADATA_FILE))
    with tfx_metadata.Metadata(config) as m:
        return m.store.get_executions()


@pytest.mark.slow
def test_lifecycle_spans_retraining_and_a_bad_span(tmp_path):
    work, data = str(tmp_path / "work"), str(tmp_path / "data")
    base = str(tmp_path / "serving")
    research1 = str(tmp_path / "research" / "span-1")
    train_demo_model.train(_span(data, 1), research1, steps=60, seed=1)

    first = runner.run_full(work, data, research1, base, evaluate=False, **FAST)
    assert first["span"] == 1 and first["pushed"] and first["pushed_version"] == 1
    assert first["new_push"]

    seen = {e.id for e in _executions(work)}
    again = runner.run_full(work, data, research1, base, evaluate=False, **FAST)
    assert not again["new_push"] and again["served_versions"] == [1]
    # Nothing ran again: every execution the rerun recorded is a cache hit.
    rerun = [e for e in _executions(work) if e.id not in seen]
    assert rerun and {e.last_known_state for e in rerun} == {
        metadata_store_pb2.Execution.CACHED}

    research2 = str(tmp_path / "research" / "span-2")
    train_demo_model.train(_span(data, 2), research2, steps=60, seed=2)
    second = runner.run_full(work, data, research2, base, evaluate=False, **FAST)
    assert second["span"] == 2 and second["pushed_version"] == 2 and second["new_push"]

    _planted_span(data, 3)
    with pytest.raises(AnomaliesFound, match=r"feature 'item_id' \(data_vs_consumer.range\)"):
        runner.run_full(work, data, research2, base, evaluate=False, **FAST)
    root = os.path.join(base, "ctr")
    assert serving.versions(root) == [1, 2]
    assert serving.State.load(root).labels["stable"] == 2
    assert not [d for d in os.listdir(root) if d.startswith(serving.STAGING_PREFIX)]
    served = tf.saved_model.load(os.path.join(root, "2"))
    assert "serving_default" in served.signatures
