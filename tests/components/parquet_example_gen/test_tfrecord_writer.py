"""ParquetExampleGen's sink: its writes run on a thread of their own, in order,
and a failed write is raised to the caller, never lost."""
from __future__ import annotations

import pytest

from tfx_bridge.components.parquet_example_gen.tfrecord_writer import BackgroundWriter


class _Handle:
    def __init__(self, fail_at=None):
        self.parts, self.closed, self.fail_at = [], False, fail_at

    def write(self, data):
        if len(self.parts) == self.fail_at:
            raise OSError(28, "No space left on device")
        self.parts.append(data)

    def close(self):
        self.closed = True


def test_background_writer_writes_in_order_then_closes():
    handle = _Handle()
    writer = BackgroundWriter(handle, depth=2)
    for i in range(100):
        writer.write(bytes([i]))
    writer.close()
    assert handle.parts == [bytes([i]) for i in range(100)] and handle.closed


def test_background_writer_failed_write_raised_by_close_later_parts_dropped():
    handle = _Handle(fail_at=3)
    writer = BackgroundWriter(handle, depth=2)
    for i in range(10):  # the error may surface here or at close; never swallowed
        try:
            writer.write(bytes([i]))
        except OSError:
            break
    with pytest.raises(OSError, match="No space left on device"):
        writer.close()
    assert handle.parts == [b"\x00", b"\x01", b"\x02"] and handle.closed


def test_background_writer_dropped_without_close_ends_its_thread_and_closes():
    import gc

    handle = _Handle()
    writer = BackgroundWriter(handle)
    writer.write(b"x")
    thread = writer._thread
    del writer  # as Beam drops a failed bundle's writer
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive() and handle.closed and handle.parts == [b"x"]
