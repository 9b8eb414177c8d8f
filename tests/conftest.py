"""Shared fixtures. Expensive ones (TFX pipeline runs) are session-scoped."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """The data pipeline (ParquetExampleGen -> StatisticsGen -> SchemaGen ->
    SchemaGuard with the demo contract) run once under LocalDagRunner over two
    demo span folders."""
    from tfx_bridge.pipelines import demo_data, runner

    workdir = tmp_path_factory.mktemp("demo_run")
    data_root = str(workdir / "data")
    demo_data.write_demo_spans(data_root, spans=[1, 2], rows_per_span=600)
    result = runner.run_data_demo(str(workdir), data_root)
    result["workdir"] = str(workdir)
    result["data_root"] = data_root
    return result
