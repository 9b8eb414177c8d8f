"""tfx_bridge.storage.objectstore: the AWS variables mapped for tensorflow-io."""
from __future__ import annotations

import pytest

from tfx_bridge.storage import objectstore

ENV = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "eu-west-1",
       "AWS_ENDPOINT_URL": "https://minio.example:9000"}


def test_tfio_env_https_endpoint_and_existing_values_kept():
    assert objectstore.tfio_env(ENV) == {"S3_ENDPOINT": "https://minio.example:9000",
                                         "S3_USE_HTTPS": "1"}
    assert objectstore.tfio_env({**ENV, "S3_ENDPOINT": "x"}) == {}


def test_custom_endpoint_without_keys_names_the_variables():
    with pytest.raises(objectstore.ObjectStoreError,
                       match=r"needs credentials: set AWS_SECRET_ACCESS_KEY \(or AWS_PROFILE\)"):
        objectstore.check_credentials({"AWS_ENDPOINT_URL": "http://x:9000",
                                       "AWS_ACCESS_KEY_ID": "k"})
    objectstore.check_credentials({"AWS_REGION": "us-east-1"})  # AWS itself: roles work
