"""Findings 5 and 6: oversized strings and records cost memory bounded by their
size, and forged record headers are refusals, not crashes.

Each case runs the CLI in a child process (tests/security/rss_probe.py) that
measures its peak RSS growth over the process's resident set at the start
of the command, so a crash shows as a signal and the figure is the command's
own. Figures are recorded in docs/BENCHMARKS.md; no timing here.
"""
from __future__ import annotations

import os
import re
import struct
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from tfx_bridge.artifacts import tfrecord

PROBE = os.path.join(os.path.dirname(__file__), "rss_probe.py")
MB = 1 << 20
SIZE = 48 * MB  # one incompressible string or record of this many bytes


def _probe(*args):
    """(peak RSS growth in bytes, CLI exit code, stderr) of ``tfx-bridge ARGS``."""
    proc = subprocess.run([sys.executable, PROBE, *args], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"killed or crashed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    m = re.search(r"RSS_GROWTH (\d+) EXIT (\d+)", proc.stdout)
    assert m, proc.stdout[-2000:] + proc.stderr[-2000:]
    return int(m.group(1)), int(m.group(2)), proc.stderr


def _huge_string_parquet(folder, **write_options) -> str:
    os.makedirs(folder, exist_ok=True)
    text = os.urandom(SIZE // 2).hex()  # incompressible for snappy
    pq.write_table(pa.table({"id": [1, 2], "blob": [text, "x"]}),
                   os.path.join(folder, "d.parquet"), **write_options)
    return str(folder)


def test_ingest_huge_string_plain_page_peak_rss_under_4x(tmp_path):
    base = _huge_string_parquet(tmp_path / "in", use_dictionary=False)
    # Two rows of random strings: a split may get none (refused by default; not the point).
    growth, code, err = _probe("ingest", "--input-base", base, "--output",
                               str(tmp_path / "out"), "--quiet", "--allow-empty-splits")
    assert code == 0, err
    assert growth < 4 * SIZE, f"peak RSS grew {growth / MB:.0f} MB for a {SIZE // MB} MB string"


def test_ingest_huge_string_dictionary_page_adds_little_to_arrow_reader(tmp_path):
    # pyarrow's default writer puts the string in a dictionary page; Arrow's own
    # reader peaks near 4x reading that page back (compressed page, decompressed
    # page, dictionary, dense copy). Measured in the same kind of child process,
    # ingest must add at most half the string on top of it (it added ~44x before).
    base = _huge_string_parquet(tmp_path / "in")
    arrow_alone = subprocess.run(
        [sys.executable, "-c", _ARROW_READ, os.path.join(base, "d.parquet")],
        capture_output=True, text=True, timeout=300, check=True)
    reader = int(arrow_alone.stdout.split()[-1])
    # Two rows of random strings: a split may get none (refused by default; not the point).
    growth, code, err = _probe("ingest", "--input-base", base, "--output",
                               str(tmp_path / "out"), "--quiet", "--allow-empty-splits")
    assert code == 0, err
    assert growth < reader + SIZE // 2, (
        f"ingest grew {growth / MB:.0f} MB; Arrow's reader alone {reader / MB:.0f} MB")


_ARROW_READ = """
import sys, pyarrow.parquet as pq
def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")
start = rss("VmRSS")
table = pq.ParquetFile(sys.argv[1]).read_row_group(0, use_threads=False)
print(rss("VmHWM") - start)
"""


def _record_file(folder, data: bytes, claimed=None) -> str:
    """A Split-train folder with one records file holding ``data`` as one record
    (with a forged length when ``claimed`` is given)."""
    split = os.path.join(folder, "Split-train")
    os.makedirs(split, exist_ok=True)
    head = struct.pack("<Q", len(data) if claimed is None else claimed)
    with open(os.path.join(split, "data_tfrecord-00000-of-00001"), "wb") as f:
        f.write(head + struct.pack("<I", tfrecord.masked_crc(head)) + data
                + struct.pack("<I", tfrecord.masked_crc(data)))
    return str(folder)


SCHEMA = 'feature { name: "blob" type: BYTES }\n'


@pytest.fixture()
def schema(tmp_path):
    path = tmp_path / "schema.pbtxt"
    path.write_text(SCHEMA)
    return str(path)


def _blob_example(size: int) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature={"blob": tf.train.Feature(
        bytes_list=tf.train.BytesList(value=[os.urandom(size)]))})).SerializeToString()


def test_validate_forged_terabyte_header_exit_2_not_signal(tmp_path, schema, capfd):
    # In this process: TF's reader crashed it (SIGSEGV) on this 80-byte file.
    from tfx_bridge import cli

    examples = _record_file(tmp_path / "ex", b"\0" * 64, claimed=1 << 40)
    code = cli.main(["validate", "--examples", examples, "--schema", schema, "--output",
                     str(tmp_path / "out"), "--quiet"])
    err = capfd.readouterr().err
    assert code == 2, err
    assert ("data_tfrecord-00000-of-00001, record 0 at byte 0: the record claims "
            "1099511627776 bytes, over the limit of 67108864 bytes") in err


def test_validate_record_over_limit_refused_before_it_is_read_and_under_it_bounded(
        tmp_path, schema):
    """One child, two commands (the refusal first: the second is measured from its own
    start, and reuses none of a big first one's memory)."""
    examples = _record_file(tmp_path / "ex", _blob_example(SIZE))
    args = ["validate", "--examples", examples, "--schema", schema, "--quiet"]
    proc = subprocess.run([sys.executable, PROBE, *args, "--output", str(tmp_path / "o1"),
                           "--max-record-mb", "16", "--then", *args, "--output",
                           str(tmp_path / "o2")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"killed or crashed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    (refused, refused_code), (read, read_code) = [
        (int(g), int(c)) for g, c in re.findall(r"RSS_GROWTH (\d+) EXIT (\d+)", proc.stdout)]
    assert refused_code == 2 and "over the limit of 16777216 bytes" in proc.stderr, proc.stderr
    assert refused < SIZE // 2
    assert read_code == 0, proc.stderr
    assert read < 4 * SIZE, f"peak RSS grew {read / MB:.0f} MB for a {SIZE // MB} MB record"
