"""split_hash: row hashes and buckets pinned on known values.

Which split a row lands in is bit-stable by contract (docs/ARCHITECTURE.md,
split_hash's docstring): changing any value below moves rows between train and
eval for every user's existing data, so these values are never updated to
match new code.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from tfx_bridge.components.parquet_example_gen.split_hash import bucket_of, row_hashes


def _batch() -> pa.RecordBatch:
    # The three converted layouts, with null, empty, -0.0, an empty and a non-UTF-8 string.
    return pa.record_batch([
        pa.array([[1], [0], [-7, 3], None, []], pa.list_(pa.int64())),
        pa.array([[0.5], [-0.0], [], [1.25, 2.0], None], pa.list_(pa.float32())),
        pa.array([[b"ab"], [b""], None, [b"x", b"yz"], [b"\xff"]], pa.list_(pa.binary())),
    ], ["id", "score", "tag"])


PINNED_ROWS = [0xD6DFE187FAC519D3, 0xA728944E3B5BD01D, 0xEFBAE4A01EAFD4CF,
               0x3B8D974AE11FE7D2, 0xA7ED882B75FDABDE]


def test_row_hashes_all_layouts_give_pinned_values():
    assert [int(h) for h in row_hashes(_batch(), ["id", "score", "tag"])] == PINNED_ROWS


def test_row_hashes_one_int_column_gives_pinned_values():
    assert [int(h) for h in row_hashes(_batch(), ["id"])] == [
        0xB7C6093D77539FA0, 0xA1AF501A53AB4CA6, 0xE4D56691F167AF0C,
        0x1EA381FE5BB48664, 0x785A098D7221A8B0]


def test_row_hashes_column_order_given_does_not_matter():
    batch = _batch()
    assert [int(h) for h in row_hashes(batch, ["tag", "id", "score"])] == PINNED_ROWS


def test_row_hashes_sliced_batch_gives_the_rows_own_values():
    # A batch cut from a larger one (offsets not from 0) hashes each row as alone.
    assert [int(h) for h in row_hashes(_batch().slice(2, 3),
                                       ["id", "score", "tag"])] == PINNED_ROWS[2:]


def test_bucket_of_pinned_hashes_gives_pinned_buckets():
    hashes = np.array(PINNED_ROWS, np.uint64)
    assert bucket_of(hashes, 3).tolist() == [1, 1, 0, 0, 2]
    assert bucket_of(hashes, 100).tolist() == [55, 85, 67, 62, 26]
