"""tfx_bridge.torch.order: keys and order from record content only."""
from __future__ import annotations

import numpy as np

from tfx_bridge.torch.order import canonical, keys, row_words


def _records():
    return {"x": np.array([3, 1, 2, 1], np.int64),
            "y": np.array([[0.5, 1.0], [0.25, 0.0], [1.0, 2.0], [0.25, 0.0]], np.float32)}


def test_row_words_pads_each_record_to_whole_words():
    words = row_words({"a": np.array([1, 2], np.int32)})
    assert words.dtype == np.uint64 and words.shape == (2, 1)
    assert words[:, 0].tolist() == [1, 2]
    # int64 x then 2 float32 y: 8 + 8 bytes, two words per record.
    assert row_words(_records()).shape == (4, 2)


def test_row_words_no_features_gives_one_zero_word_per_record():
    assert row_words({}).shape == (0, 1)


def test_keys_equal_records_equal_keys_other_seed_other_keys():
    k = keys(row_words(_records()), 7)
    assert k[1] == k[3] and len(set(k.tolist())) == 3
    assert (keys(row_words(_records()), 8) != k).all()


def test_keys_pinned_values_for_a_known_record():
    # A reader's records and their order depend on these values: they never change.
    words = row_words({"x": np.array([1, 2], np.int64)})
    assert [hex(int(v)) for v in keys(words, 0)] == ["0x83ec686c1600460a", "0xef30b01c2974aeeb"]


def test_canonical_same_records_any_layout_same_order():
    a = _records()
    perm = [2, 0, 3, 1]
    b = {k: v[perm] for k, v in a.items()}
    in_a = [a["x"][i] for i in canonical(row_words(a))]
    in_b = [b["x"][i] for i in canonical(row_words(b))]
    assert in_a == in_b == [1, 1, 2, 3]  # sorted by words: x is the first


def test_canonical_no_records_gives_empty_indices():
    assert canonical(np.zeros((0, 1), np.uint64)).tolist() == []
