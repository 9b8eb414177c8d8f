"""tfx_bridge.artifacts.compare: one definition of "the same numbers"."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tfx_bridge.artifacts.compare import Comparison, compare, is_exact_dtype


def test_compare_floats_within_atol_ok_with_max_errors():
    c = compare(np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0005, 3.999]), atol=1e-3)
    assert c.ok and c.mismatches == 0
    assert c.max_abs == pytest.approx(1e-3) and c.max_rel == pytest.approx(2.5e-4)


def test_compare_floats_over_atol_counts_mismatches():
    c = compare(np.array([1.0, 2.0, 4.0]), np.array([1.1, 2.0, 4.2]), atol=0.05)
    assert not c.ok and c.mismatches == 2 and c.max_abs == pytest.approx(0.2)


def test_compare_rtol_scales_with_reference():
    ref, got = np.array([1000.0]), np.array([1000.5])
    assert not compare(ref, got, atol=0.1).ok
    assert compare(ref, got, atol=0.1, rtol=1e-3).ok


def test_compare_nan_matches_nan_only():
    c = compare(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), atol=0, rtol=1e-3)
    assert c == Comparison(0.0, 0.0, 0, True)
    c = compare(np.array([np.nan]), np.array([1.0]), atol=1.0)
    assert not c.ok and c.mismatches == 1


def test_compare_infinity_matches_the_same_infinity_only_whatever_rtol():
    masked = np.array([-np.inf, 2.0, np.inf], np.float32)
    assert compare(masked, masked.copy(), atol=1e-4) == Comparison(0.0, 0.0, 0, True)
    for got in ([np.inf, 2.0, np.inf], [-3.0e38, 2.0, np.inf], [-np.inf, 2.0, 5.0]):
        c = compare(masked, np.array(got, np.float32), atol=1e-4, rtol=1e-3)
        assert not c.ok and c.mismatches == 1 and c.max_abs == c.max_rel == float("inf")


def test_compare_integers_exact():
    assert compare(np.array([1, 2], np.int64), np.array([1, 2], np.int32), atol=10).ok
    c = compare(np.array([1, 2], np.int64), np.array([1, 3], np.int64), atol=10)
    assert c == Comparison(1.0, 0.0, 1, False)


def test_compare_shape_or_dtype_difference_mismatches_every_element():
    c = compare(np.zeros((2, 3)), np.zeros((3, 2)), atol=1.0)
    assert not c.ok and c.mismatches == 6 and math.isinf(c.max_abs)
    assert compare(np.zeros(2, np.float32), np.zeros(2, np.float64), atol=0).ok
    assert not compare(np.zeros(2, np.float32), np.zeros(2, np.float64), atol=0,
                       same_dtype=True).ok


@pytest.mark.parametrize("dtype,exact", [(np.int8, True), (np.uint64, True), (np.bool_, True),
                                         (np.float16, False), (np.float64, False)])
def test_is_exact_dtype_integers_and_bools_only(dtype, exact):
    assert is_exact_dtype(dtype) is exact
