"""The importer's zoo, shared by test_zoo.py and test_zoo_attention.py."""
from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def zoo_imports(tmp_path_factory):
    """Zoo models imported on first use, once per test process (10-20 s each)."""
    pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import zoo

    return zoo.LazyImports(tmp_path_factory)
