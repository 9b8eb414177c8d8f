"""tfx_bridge.pipelines.spans: the pre-check reads spans as TFX's driver does
(glob, then int()), and refuses by name the folders the two would read apart."""
from __future__ import annotations

import os

import pytest

from tfx_bridge.pipelines import spans
from tfx_bridge.pipelines.spans import SpanError

PATTERN = "span-{SPAN}/*.parquet"


def _root(tmp_path, *folders, files=("part-0.parquet",)):
    for folder in folders:
        os.makedirs(tmp_path / folder, exist_ok=True)
        for name in files:
            (tmp_path / folder / name).write_bytes(b"")
    return str(tmp_path)


def test_spans_plain_numbers_read_as_tfx_reads_them_newest_is_highest(tmp_path):
    root = _root(tmp_path, "span-1", "span-2", "span-10")
    (tmp_path / "span-3").mkdir()  # no matching file: not a span for the driver either
    found = spans.spans(root, PATTERN)
    assert sorted(found) == [1, 2, 10]
    assert spans.latest_span(root, PATTERN).folder == "span-10"


@pytest.mark.parametrize("folder", ["span-2.bak", "span-x", "span-", "span-1e3", "span-0x10"])
def test_spans_token_int_cannot_read_refused_naming_the_folder(tmp_path, folder):
    root = _root(tmp_path, "span-1", folder)
    with pytest.raises(SpanError, match=rf"{folder}.* no span number: TFX's ExampleGen"):
        spans.spans(root, PATTERN)


@pytest.mark.parametrize("folder, read_as", [
    ("span-01", "read by TFX as span 1"), ("span-1_0", "read by TFX as span 10"),
    ("span-+2", "read by TFX as span 2"), ("span- 2", "read by TFX as span 2"),
    ("span-99999999999999999999", "past the largest span"), ("span--1", "negative")])
def test_spans_non_canonical_padded_or_overflowing_refused_saying_how_tfx_reads_it(
        tmp_path, folder, read_as):
    root = _root(tmp_path, "span-1", folder)
    with pytest.raises(SpanError, match=rf"{folder.replace('+', '[+]')}: span .* is {read_as}"):
        spans.spans(root, PATTERN)


def test_spans_other_patterns_and_research_roots_same_rule(tmp_path):
    root = _root(tmp_path, "span-4", "span-7", files=("weights.pt",))
    assert spans.latest_span(root, "span-{SPAN}/weights.pt").number == 7
    with pytest.raises(SpanError, match="once"):
        spans.spans(root, "data/*.parquet")
    with pytest.raises(SpanError, match="holds no file matching"):
        spans.latest_span(root, PATTERN)


def test_check_run_inputs_stray_or_padded_span_refused_before_the_pipeline(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tfx_bridge.pipelines import runner

    for folder in ("span-1", "span-2.bak"):
        os.makedirs(tmp_path / folder)
        pq.write_table(pa.table({"a": [1]}), str(tmp_path / folder / "part-0.parquet"))
    with pytest.raises(SpanError, match="span-2.bak"):
        runner.check_run_inputs(str(tmp_path), None)
    os.rename(tmp_path / "span-2.bak", tmp_path / "span-02")
    with pytest.raises(SpanError, match="span-02: span '02' is read by TFX as span 2"):
        runner.check_run_inputs(str(tmp_path), None)
    os.rename(tmp_path / "span-02", tmp_path / "span-2")
    assert runner.check_run_inputs(str(tmp_path), None) == (None, None)
