"""Deterministic demo data: a click-through dataset in daily span folders.

Generated at run time (nothing downloaded, no binaries in git). Each span
folder ``span-<n>/`` holds two Parquet files with the column types the
type table in README covers: int32, int64, float32, float64, string,
dictionary<string>, bool, timestamp and list<int32>.

Example:
  >>> import tempfile
  >>> from tfx_bridge.pipelines import demo_data
  >>> root = tempfile.mkdtemp()
  >>> [p.split("/")[-1] for p in demo_data.write_demo_spans(root, spans=[1], rows_per_span=100)]
  ['span-1']
"""
from __future__ import annotations

from typing import Iterable, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tfx_bridge.pipelines.config import DEMO_ROWS_PER_SPAN, DEMO_SPANS
from tfx_bridge.storage import fs

# The demo CtrMoE model's signature (importer input specs, output names).
CTR_INPUTS = ["item_id:int32:-1:0..999", "hour:int32:-1:0..23", "price:float32:-1:0..100",
              "user_ctr:float32:-1:0..0.5"]
CTR_OUTPUTS = ["score", "experts"]
SPAN_DIR = "span-{span}"
SPAN_PATTERN = "span-{SPAN}/*.parquet"
FILES_PER_SPAN = 2
LABEL = "clicked"
NUM_ITEMS = 1000
HISTORY_LEN = 5
COUNTRIES = ["de", "fr", "in", "jp", "us", "br"]
DEVICES = ["android", "ios", "web"]


def demo_schema() -> pa.Schema:
    """The Arrow schema of every demo file (the source contract)."""
    return pa.schema([
        ("user_id", pa.int64()),
        ("item_id", pa.int32()),
        ("hour", pa.int32()),
        ("price", pa.float32()),
        ("user_ctr", pa.float64()),
        ("country", pa.string()),
        ("device", pa.dictionary(pa.int32(), pa.string())),
        ("is_returning", pa.bool_()),
        ("event_time", pa.timestamp("ms")),
        ("hist_items", pa.list_(pa.int32())),
        (LABEL, pa.int64()),
    ])


def make_span_table(span: int, rows: int, seed: int = 0) -> pa.Table:
    """One span's rows; the label depends on the features, so a model can learn it."""
    rng = np.random.default_rng([seed, span])
    user = rng.integers(1, 50_000, rows, dtype=np.int64)
    item = rng.integers(0, NUM_ITEMS, rows).astype(np.int32)
    hour = rng.integers(0, 24, rows).astype(np.int32)
    price = np.round(rng.gamma(2.0, 15.0, rows), 2).astype(np.float32)
    user_ctr = rng.beta(2, 20, rows)
    country = np.array(COUNTRIES)[rng.integers(0, len(COUNTRIES), rows)]
    device = np.array(DEVICES)[rng.integers(0, len(DEVICES), rows)]
    returning = rng.random(rows) < 0.6
    hist_len = rng.integers(0, HISTORY_LEN + 1, rows)
    hist_values = rng.integers(0, NUM_ITEMS, int(hist_len.sum())).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(hist_len)]).astype(np.int32)
    # Whether the item was seen before drives the click, with price, ctr, hour.
    seen = np.array([item[i] in hist_values[offsets[i]:offsets[i + 1]] for i in range(rows)])
    logit = (-1.5 + 8.0 * user_ctr - 0.02 * price + 1.5 * seen + 0.6 * returning
             + 0.5 * np.sin(hour / 24 * 2 * np.pi) + (item % 7 == 0) * 0.8)
    clicked = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    day_ms = (20_000 + span) * 86_400_000
    event_time = day_ms + rng.integers(0, 86_400_000, rows)
    schema = demo_schema()
    return pa.Table.from_arrays([
        pa.array(user, pa.int64()),
        pa.array(item, pa.int32()),
        pa.array(hour, pa.int32()),
        pa.array(price, pa.float32()),
        pa.array(user_ctr, pa.float64()),
        pa.array(country, pa.string()),
        pa.array(device, pa.string()).dictionary_encode(),
        pa.array(returning, pa.bool_()),
        pa.array(event_time, pa.timestamp("ms")),
        pa.ListArray.from_arrays(pa.array(offsets), pa.array(hist_values, pa.int32())),
        pa.array(clicked, pa.int64()),
    ], schema=schema)


def write_demo_spans(root: str, spans: Iterable[int] = tuple(range(1, DEMO_SPANS + 1)),
                     rows_per_span: int = DEMO_ROWS_PER_SPAN,
                     seed: int = 0, files_per_span: int = FILES_PER_SPAN,
                     row_group_size: Optional[int] = None,
                     overwrite: bool = False) -> List[str]:
    """Writes ``root/span-<n>/part-<k>.parquet`` (existing files are kept unless
    ``overwrite``) and returns the span folders."""
    import io

    folders = []
    for span in spans:
        table = make_span_table(span, rows_per_span, seed)
        folder = fs.join(root, SPAN_DIR.format(span=span))
        per_file = -(-rows_per_span // files_per_span)
        for k in range(files_per_span):
            path = fs.join(folder, f"part-{k}.parquet")
            if fs.exists(path) and not overwrite:
                continue  # same seed, same bytes; keeping the file keeps ExampleGen cached
            buffer = io.BytesIO()  # small demo files; written whole through the layer
            pq.write_table(table.slice(k * per_file, per_file), buffer,
                           row_group_size=row_group_size)
            fs.write_bytes(path, buffer.getvalue())
        folders.append(folder)
    return folders
