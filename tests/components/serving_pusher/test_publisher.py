"""publisher: one publisher per storage kind, chosen from the base path."""
from __future__ import annotations

import pytest

from tfx_bridge.components.serving_pusher import publisher
from tfx_bridge.components.serving_pusher.config import PusherConfig
from tfx_bridge.components.serving_pusher.errors import PusherConfigError
from tfx_bridge.components.serving_pusher.object_store_publisher import ObjectStorePublisher
from tfx_bridge.components.serving_pusher.publish import LocalDiskPublisher


@pytest.mark.parametrize("base, kind", [("/serving/models", LocalDiskPublisher),
                                        ("relative/models", LocalDiskPublisher),
                                        ("s3://bucket/serving", ObjectStorePublisher)])
def test_publisher_for_base_path_picks_its_kind(base, kind):
    assert isinstance(publisher.publisher_for(base), kind)
    assert isinstance(publisher.publisher_for(base + "/ctr"), kind)  # a model folder too


def test_publisher_for_gs_base_path_none_and_config_refuses_it():
    assert publisher.publisher_kind("gs://bucket/serving") is None
    with pytest.raises(ValueError, match="No publisher for gs://bucket/serving"):
        publisher.publisher_for("gs://bucket/serving")
    with pytest.raises(PusherConfigError, match="publishes to local or mounted folders"):
        PusherConfig("gs://bucket/serving", "ctr")


def test_local_disk_publisher_empty_model_folder_has_no_versions_or_leftovers(tmp_path):
    local = publisher.publisher_for(str(tmp_path))
    root = str(tmp_path / "ctr")
    assert local.versions(root) == []
    (tmp_path / "ctr" / "3").mkdir(parents=True)
    (tmp_path / "ctr" / "notes").mkdir()
    with local.lock(root, 1.0):
        assert local.versions(root) == [3]
        assert local.clean_staging(root) == []
