"""tfx_bridge.storage on s3://, against an S3-compatible server started on 127.0.0.1."""
from __future__ import annotations

import os

import pytest

from tfx_bridge.storage import fs

pytestmark = pytest.mark.s3


def test_fs_layer_on_s3_round_trip(s3_bucket):
    root = fs.join(s3_bucket, "a")
    fs.write_text(fs.join(root, "x", "t.txt"), "hello")
    assert fs.read_text(fs.join(root, "x", "t.txt")) == "hello"
    assert fs.isdir(fs.join(root, "x")) and fs.files_under(root) == ["x/t.txt"]
    fs.remove(root)
    assert not fs.exists(fs.join(root, "x", "t.txt"))


def test_s3_missing_bucket_is_a_refusal_naming_the_path(s3_server):
    from tfx_bridge.storage.objectstore import ObjectStoreError

    with pytest.raises(ObjectStoreError, match=r"s3://no-such-bucket-here/x: NoSuchBucket .*"
                       r"Check the bucket name"):
        fs.listdir("s3://no-such-bucket-here/x")
    with pytest.raises(ObjectStoreError, match=r"NoSuchBucket"):
        list(fs.walk("s3://no-such-bucket-here/x"))



def test_staged_locally_remote_copied_down_and_output_uploaded_only_on_success(s3_bucket):
    fs.write_text(f"{s3_bucket}/model/w.txt", "weights")
    with fs.staged_locally(f"{s3_bucket}/model", output=f"{s3_bucket}/out") as (m, out):
        assert not fs.is_remote(m) and not fs.is_remote(out)
        with open(os.path.join(m, "w.txt"), encoding="utf-8") as f:
            assert f.read() == "weights"
        with open(os.path.join(out, "report.json"), "w", encoding="utf-8") as f:
            f.write("{}")
    assert fs.read_text(f"{s3_bucket}/out/report.json") == "{}"
    assert not os.path.exists(m) and not os.path.exists(out)  # both copies removed
    with pytest.raises(RuntimeError, match="the tool failed"):
        with fs.staged_locally(output=f"{s3_bucket}/failed") as (out,):
            with open(os.path.join(out, "half.txt"), "w", encoding="utf-8") as f:
                f.write("x")
            raise RuntimeError("the tool failed")
    assert not fs.exists(f"{s3_bucket}/failed/half.txt")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_read_tail_gives_the_last_bytes_without_seeking_the_stream(where, tmp_path, request):
    root = request.getfixturevalue("s3_bucket") if where == "s3" else str(tmp_path)
    for name, data in (("long", b"0123456789"), ("short", b"ab"), ("empty", b"")):
        path = fs.join(root, name)
        fs.write_bytes(path, data)
        assert fs.read_tail(path, 4) == data[-4:], name

