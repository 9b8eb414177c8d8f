"""Object stores: ``s3://`` wired from the standard AWS variables; ``gs://`` as TF has it.

TF 2.16 reads ``s3://`` only through ``tensorflow-io`` (its filesystem plug-in
registers the scheme when ``tensorflow_io`` is imported), which is configured
by its own variables (``S3_ENDPOINT``, ``S3_USE_HTTPS``); Beam reads ``s3://``
through boto3 with ``--s3_*`` pipeline options. Users set what boto3 reads:

- ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (``AWS_SESSION_TOKEN``)
- ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``)
- ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) for MinIO and other
  S3-compatible servers

and :func:`tfio_env` maps them onto tensorflow-io's variables (for stock TFX
components, which read s3 through tf.io.gfile), :func:`tfx_bridge.beam.s3_args`
onto Beam's options (explicit options win). tfx-bridge's own cores read s3 through
boto3 (:mod:`tfx_bridge.storage.s3`): tensorflow-io 0.37.1, the last release for TF
2.16, aborts a process that used its S3 filesystem at exit (exit 134,
tensorflow/io#2039). No TFX imports.

Example:
    >>> env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_DEFAULT_REGION": "eu-west-1"}
    >>> sorted(tfio_env(env).items())
    [('AWS_REGION', 'eu-west-1'), ('S3_ENDPOINT', 'http://127.0.0.1:9000'), ('S3_USE_HTTPS', '0')]
"""
from __future__ import annotations

import os
from typing import Dict, Mapping, Optional, Sequence
from urllib.parse import urlparse

from tfx_bridge.errors import BridgeError

CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


class ObjectStoreError(BridgeError):
    """An object store path cannot be used as configured (extra, credentials, endpoint)."""


def endpoint_url(env: Mapping[str, str] = os.environ) -> Optional[str]:
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def region(env: Mapping[str, str] = os.environ) -> Optional[str]:
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


def tfio_env(env: Mapping[str, str] = os.environ) -> Dict[str, str]:
    """tensorflow-io's variables derived from the AWS ones (only those not set)."""
    out: Dict[str, str] = {}
    url = endpoint_url(env)
    if url and "S3_ENDPOINT" not in env:
        out["S3_ENDPOINT"] = url
        if "S3_USE_HTTPS" not in env:
            out["S3_USE_HTTPS"] = "0" if urlparse(url).scheme == "http" else "1"
    if region(env) and "AWS_REGION" not in env:
        out["AWS_REGION"] = region(env)
    return out


def check_credentials(env: Mapping[str, str] = os.environ) -> None:
    """With a custom endpoint (MinIO, a test server) there is no instance role to
    fall back on: both key variables must be set."""
    if endpoint_url(env) is None and env.get("S3_ENDPOINT") is None:
        return  # AWS itself: profiles, web identity and instance roles also work
    missing = [v for v in CREDENTIAL_VARIABLES if not env.get(v)]
    if missing and not env.get("AWS_PROFILE"):
        raise ObjectStoreError(
            f"s3:// with the endpoint {endpoint_url(env) or env.get('S3_ENDPOINT')} needs "
            f"credentials: set {' and '.join(missing)} (or AWS_PROFILE).")


_TFIO = {"enabled": False}


def uses_s3(paths: Sequence[Optional[str]]) -> bool:
    return any(isinstance(p, str) and p.startswith("s3://") for p in paths)


def enable_tfio() -> None:
    """Registers ``s3://`` for ``tf.io.gfile`` in this process, for stock TFX code
    (StatisticsGen, Evaluator, TFX's own artifact handling), configured from the
    AWS variables (:func:`tfio_env`). A process that called this must end with
    :func:`exit_now`: tensorflow-io 0.37.1 aborts it at exit otherwise."""
    check_credentials()
    os.environ.update(tfio_env())
    try:
        import tensorflow_io  # noqa: F401  (registers the s3 filesystem plug-in)
    except ImportError as e:
        raise ObjectStoreError(
            "Stock TFX components read s3:// through tensorflow-io: "
            "pip install 'tfx-bridge[s3]'.") from e
    _TFIO["enabled"] = True


def tfio_enabled() -> bool:
    return _TFIO["enabled"]


def exit_now(code: int):
    """Ends the process with ``code`` after flushing, skipping C++ teardown.

    tensorflow-io 0.37.1's S3 filesystem aborts the interpreter's exit ("pure
    virtual method called", exit 134; tensorflow/io#2039), which would turn
    every successful run into a failure for a scheduler. Only for processes
    whose work is done: nothing after this runs (atexit handlers included).
    """
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
