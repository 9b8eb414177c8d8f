"""ServingPusher's core with the model on s3://, and a gs:// base path refused."""
from __future__ import annotations

import os

import pytest

from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.storage import fs

pytestmark = pytest.mark.s3


def test_push_model_from_s3_to_local_base_path(tmp_path, s3_bucket, scaled_saved_model):
    from tfx_bridge.components.serving_pusher import serving

    remote = fs.join(s3_bucket, "optimized", "Format-Serving")
    fs.copy_tree(scaled_saved_model(str(tmp_path / "m")), remote)
    result = serving.push(remote, PusherConfig(str(tmp_path / "serving"), "ctr"))
    assert result.pushed and result.version == 1
    assert (tmp_path / "serving" / "ctr" / "1" / "saved_model.pb").is_file()


def test_push_gs_base_path_refused_nothing_written(tmp_path, monkeypatch, scaled_saved_model):
    from tfx_bridge.components.serving_pusher import serving
    from tfx_bridge.components.serving_pusher.errors import PusherConfigError

    monkeypatch.chdir(tmp_path)
    model = scaled_saved_model(str(tmp_path / "m"))
    with pytest.raises(PusherConfigError, match=r"gs://bucket/serving: .*Push to s3://, or "
                       r"to a folder the server mounts"):
        serving.push(model, PusherConfig("gs://bucket/serving", "ctr"))
    with pytest.raises(PusherConfigError, match=r"conditional writes"):
        serving.rollback("gs://bucket/serving", "ctr", 1)
    assert sorted(os.listdir(tmp_path)) == ["m"]  # no local folder named "gs:"
