"""Demo data: deterministic, in span folders, with the type mix the docs promise."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tfx_bridge.pipelines import demo_data


def test_write_demo_spans_same_seed_same_bytes(tmp_path):
    a = demo_data.write_demo_spans(str(tmp_path / "a"), spans=[1, 2], rows_per_span=200)
    b = demo_data.write_demo_spans(str(tmp_path / "b"), spans=[1, 2], rows_per_span=200)
    for fa, fb in zip(a, b, strict=True):
        for part in ("part-0.parquet", "part-1.parquet"):
            assert pq.read_table(f"{fa}/{part}").equals(pq.read_table(f"{fb}/{part}"))


def test_write_demo_spans_spans_differ_and_types_match_schema(tmp_path):
    folders = demo_data.write_demo_spans(str(tmp_path), spans=[1, 2], rows_per_span=100)
    t1 = pq.read_table(folders[0])
    t2 = pq.read_table(folders[1])
    assert t1.num_rows == t2.num_rows == 100
    assert not t1.column("user_id").equals(t2.column("user_id"))
    schema = pq.read_schema(f"{folders[0]}/part-0.parquet")
    assert schema.field("item_id").type == pa.int32()
    assert schema.field("hist_items").type == pa.list_(pa.int32())
    assert schema.field(demo_data.LABEL).type == pa.int64()
    assert 0 < pa.compute.sum(t1.column(demo_data.LABEL)).as_py() < 100
