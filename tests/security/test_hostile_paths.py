"""Round 2 (docs/TRUST.md, 12-15): paths that escape through object store keys and
symlinks, files that hang a reader, and names that are not whole. Each refusal
comes from the shared mechanism (the storage layer's listing and opener, the lock
opener, the name rule); nothing is written outside any root (parent folders listed
before and after); a hang would show as a child's timeout."""
from __future__ import annotations

import os
import tempfile

import pytest

from tfx_bridge.storage import fs
from tfx_bridge.storage.names import NotAFileError, UnsafeNameError, check_segment


def _listing(folder) -> list:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _put(bucket: str, key: str, body: bytes = b"x") -> None:
    import boto3

    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).put_object(
        Bucket=bucket[len("s3://"):], Key=key, Body=body)


@pytest.mark.s3
def test_copy_down_of_s3_folder_with_dot_dot_key_refused_nothing_outside(tmp_path, s3_bucket,
                                                                        monkeypatch):
    _put(s3_bucket, "src/m/saved_model.pb")
    _put(s3_bucket, "src/m/../../../../escaped")  # a key, not a path: S3 keeps it
    # The local copy's folder, three levels under tmp_path/x: the key points at x/.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "x" / "y" / "tmp"))
    (tmp_path / "x" / "y" / "tmp").mkdir(parents=True)
    before = _listing(tmp_path)
    with pytest.raises(UnsafeNameError, match=r"src/m holds '\.\.', which is not a path "
                       "inside it"):
        with fs.local_copy(f"{s3_bucket}/src/m"):
            pass
    assert _listing(tmp_path) == before


@pytest.mark.s3
def test_push_of_s3_model_with_dot_dot_key_refused_before_copying(tmp_path, s3_bucket,
                                                                  monkeypatch):
    from tfx_bridge.components.serving_pusher import serving
    from tfx_bridge.components.serving_pusher.config import PusherConfig

    _put(s3_bucket, "src/m/saved_model.pb")
    _put(s3_bucket, "src/m/variables/../../../../escaped")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "x" / "y" / "tmp"))
    (tmp_path / "x" / "y" / "tmp").mkdir(parents=True)
    before = _listing(tmp_path)
    with pytest.raises(UnsafeNameError, match="is not a path inside it"):
        serving.push(f"{s3_bucket}/src/m",
                     PusherConfig(str(tmp_path / "serving"), "ctr"))
    assert _listing(tmp_path) == before


@pytest.mark.s3
def test_s3_key_with_an_empty_segment_refused_not_walked_forever(s3_bucket):
    _put(s3_bucket, "src/m//x")
    with pytest.raises(UnsafeNameError, match="an empty, '.' or '..' segment"):
        fs.files_under(f"{s3_bucket}/src/m")


@pytest.mark.parametrize("base", ["s3://bucket/base/../other", "s3://bucket/base/./x",
                                  "s3://bucket//base", "s3:///base"])
def test_pusher_base_path_with_dot_segments_refused(base):
    from tfx_bridge.components.serving_pusher.config import PusherConfig
    from tfx_bridge.components.serving_pusher.errors import PusherConfigError

    with pytest.raises(PusherConfigError, match=r"has an empty, '\.' or '\.\.' segment"):
        PusherConfig(base, "ctr")


def test_validate_fifo_in_a_split_refused_not_hung(tmp_path, cli_in_child):
    from tfx_bridge import schemas

    split = tmp_path / "examples" / "Split-train"
    split.mkdir(parents=True)
    os.mkfifo(split / "data_tfrecord-00000.gz")  # no writer: opening it would block
    proc = cli_in_child("validate", "--examples", str(tmp_path / "examples"), "--schema",
                        schemas.path(schemas.DEMO_SCHEMA), "--output", str(tmp_path / "out"),
                        timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "data_tfrecord-00000.gz is a FIFO (named pipe), not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr


def _savedmodel_with_fifo(folder, fifo: str):
    """A SavedModel-shaped folder whose ``variables/<fifo>`` is a FIFO."""
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01")
    os.mkfifo(folder / "variables" / fifo)
    return str(folder)


def test_push_fifo_inside_the_savedmodel_refused_not_hung(tmp_path, cli_in_child):
    model = _savedmodel_with_fifo(tmp_path / "m", "variables.index")
    proc = cli_in_child("push", "--model", model, "--base-path", str(tmp_path / "serving"),
                        "--model-name", "ctr", "--json", timeout=120)
    assert proc.returncode == 1, proc.stderr  # a check refused it: nothing pushed
    assert "variables/variables.index (a FIFO (named pipe): reading it would hang)" in \
        proc.stdout + proc.stderr
    assert not (tmp_path / "serving" / "ctr").exists()


def test_optimize_fifo_inside_the_savedmodel_refused_not_hung(tmp_path, cli_in_child):
    model = _savedmodel_with_fifo(tmp_path / "m", "variables.data-00000-of-00001")
    proc = cli_in_child("optimize", "--model", model, "--output", str(tmp_path / "out"),
                        timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "variables/variables.data-00000-of-00001 (a FIFO (named pipe): reading it would " \
           "hang)" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_files_under_fifo_refused_before_any_copy(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a").write_text("a")
    os.mkfifo(tmp_path / "src" / "b")
    with pytest.raises(NotAFileError, match=r"src/b is a FIFO \(named pipe\), not a regular"):
        fs.copy_tree(str(tmp_path / "src"), str(tmp_path / "dst"))
    assert not (tmp_path / "dst").exists()


def test_push_model_folder_that_is_a_symlink_refused_nothing_written_there(tmp_path):
    from tfx_bridge.components.serving_pusher import serving
    from tfx_bridge.components.serving_pusher.config import PusherConfig
    from tfx_bridge.components.serving_pusher.errors import PusherConfigError

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "saved_model.pb").write_bytes(b"\x08\x01")
    base, inside = tmp_path / "serving", tmp_path / "serving" / "elsewhere"
    inside.mkdir(parents=True)
    os.symlink(inside, base / "ctr")  # inside the base path, still not the model's folder
    before = _listing(tmp_path)
    with pytest.raises(PusherConfigError, match=r"serving/ctr is a symlink .* must be a real "
                       "folder"):
        serving.push(str(tmp_path / "m"), PusherConfig(str(base), "ctr"))
    assert _listing(tmp_path) == before


def test_push_lock_that_is_a_symlink_not_followed_nothing_created(tmp_path):
    from tfx_bridge.components.serving_pusher import publish
    from tfx_bridge.runlock import RunLockError

    root = tmp_path / "serving" / "ctr"
    root.mkdir(parents=True)
    os.symlink(tmp_path / "outside", root / publish.LOCK_FILE)
    with pytest.raises(RunLockError, match=r"\.push\.lock is a symlink; remove it"):
        with publish.push_lock(str(root)):
            pass
    assert not (tmp_path / "outside").exists()


def test_state_file_that_is_a_symlink_not_followed(tmp_path):
    from tfx_bridge.components.serving_pusher.state import STATE_FILE, State

    root = tmp_path / "serving" / "ctr"
    root.mkdir(parents=True)
    (tmp_path / "secret").write_text('{"labels": {}}')
    os.symlink(tmp_path / "secret", root / STATE_FILE)
    with pytest.raises(UnsafeNameError, match=r"\.state\.json is a symlink .* not followed"):
        State.load(str(root))


@pytest.mark.parametrize("name", ["ctr\n", "ctr\r", "\nctr", "c\ntr"])
def test_name_rules_check_the_whole_string(tmp_path, name):
    """`$` matches before a trailing newline: every rule matches the whole name."""
    from tfx_bridge.artifacts.tensorspec import TensorSpecError, parse_input_spec
    from tfx_bridge.components.parquet_example_gen.plan import SplitConfig
    from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError
    from tfx_bridge.components.pytorch_model_importer.signature import check_output_names
    from tfx_bridge.components.serving_pusher.config import PusherConfig
    from tfx_bridge.components.serving_pusher.errors import PusherConfigError

    with pytest.raises(UnsafeNameError):
        check_segment(name, "Model name")
    with pytest.raises((PusherConfigError, UnsafeNameError)):
        PusherConfig(str(tmp_path / "serving"), name)
    with pytest.raises(UnsafeNameError):
        SplitConfig((("single_split", "*.parquet"),), ((name, 2), ("eval", 1)))
    with pytest.raises(TensorSpecError, match="bad name"):
        parse_input_spec(f"{name}:float32:-1,3")
    with pytest.raises(ImporterConfigError, match="Output names must be unique identifiers"):
        check_output_names([name])
    assert not (tmp_path / "serving").exists()


def test_split_folder_name_read_back_checked_whole(tmp_path):
    from tfx_bridge.components.schema_guard.decode import list_splits

    (tmp_path / "Split-train").mkdir()
    (tmp_path / "Split-ev\nal").mkdir()
    with pytest.raises(UnsafeNameError, match=r"Split folder 'Split-ev\\nal'"):
        list_splits(str(tmp_path))


def test_span_folder_with_a_trailing_newline_is_not_a_span(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tfx_bridge.pipelines import runner

    for name in ("span-1", "span-2\n"):
        (tmp_path / "data" / name).mkdir(parents=True)
        pq.write_table(pa.table({"a": [1]}), str(tmp_path / "data" / name / "p.parquet"))
        (tmp_path / "research" / name).mkdir(parents=True)
        (tmp_path / "research" / name / "weights.pt").write_bytes(b"w")
    chosen, _ = runner.check_run_inputs(str(tmp_path / "data"), str(tmp_path / "research"))
    assert chosen == str(tmp_path / "research" / "span-1")


def test_import_model_file_that_is_a_fifo_refused_not_hung(tmp_path, cli_in_child):
    os.mkfifo(tmp_path / "model.onnx")
    proc = cli_in_child("import-model", "--onnx", str(tmp_path / "model.onnx"), "--input",
                        "x:float32:-1,3", "--output-name", "y", "--output",
                        str(tmp_path / "out"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "model.onnx is a FIFO (named pipe), not a regular file" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_read_of_a_unix_socket_refused_by_name_not_an_os_error(tmp_path):
    import socket

    path = tmp_path / "Split-train" / "data.gz"
    path.parent.mkdir()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(NotAFileError, match=r"data\.gz is a socket, not a regular file"):
            fs.read_bytes(str(path))
