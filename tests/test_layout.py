"""Every component folder has tests, and the package imports from its install."""
from __future__ import annotations

import os

import tfx_bridge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_component_has_a_test_package():
    components = sorted(
        d for d in os.listdir(os.path.join(ROOT, "components"))
        if os.path.isfile(os.path.join(ROOT, "components", d, "component.py")))
    assert components, "no components found"
    missing = [c for c in components
               if not os.path.isdir(os.path.join(ROOT, "tests", "components", c))
               or not any(f.startswith("test_") for f in
                          os.listdir(os.path.join(ROOT, "tests", "components", c)))]
    assert not missing, f"components without tests under tests/components/: {missing}"


def test_component_cores_import_without_tfx():
    """Cores take paths and values; importing one must not pull in TFX."""
    import subprocess
    import sys
    code = ("import sys; import tfx_bridge.components.parquet_example_gen.parquet_to_examples;"
            "bad = [m for m in sys.modules if m == 'tfx' or m.startswith('tfx.')];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_package_is_the_installed_tfx_bridge():
    import tfx_bridge.components.parquet_example_gen.component as c
    assert c.__name__.startswith("tfx_bridge.components.")
    assert tfx_bridge.__version__
