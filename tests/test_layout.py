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
    code = ("import sys\n"
            "import tfx_bridge.components.parquet_example_gen.parquet_to_examples\n"
            "import tfx_bridge.components.schema_guard.guard\n"
            "import tfx_bridge.components.schema_guard.report\n"
            "import tfx_bridge.components.pytorch_model_importer.convert\n"
            "import tfx_bridge.onnx_tf\n"
            "import tfx_bridge.onnx_tf.ops\n"
            "import tfx_bridge.components.pytorch_model_importer.transform_wrap\n"
            "import tfx_bridge.components.pytorch_trainer.check\n"
            "import tfx_bridge.torch.model\n"
            "bad = [m for m in sys.modules if m == 'tfx' or m.startswith('tfx.')]\n"
            "assert not bad, bad\n"
            "heavy = [m for m in ('torch', 'onnx', 'onnx2tf') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_package_is_the_installed_tfx_bridge():
    """The installed distribution maps this checkout's folders under tfx_bridge.*."""
    from importlib import metadata

    import tfx_bridge.components.parquet_example_gen.component as c
    import tfx_bridge.kubeflow.compile as k
    import tfx_bridge.pipelines.pipeline as p

    for module, folder in ((c, "components/parquet_example_gen"), (p, "pipelines"),
                           (k, "kubeflow")):
        assert os.path.dirname(os.path.realpath(module.__file__)) == os.path.join(ROOT, folder)
    assert tfx_bridge.__version__ == metadata.version("tfx-bridge")
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert scripts["tfx-bridge"] == "tfx_bridge.cli.main:entry"


def test_importer_without_torch_names_the_extra():
    """Heavy deps are lazy; a missing one says which extra to install."""
    import subprocess
    import sys
    code = ("import sys\n"
            "sys.modules['torch'] = None  # as if not installed\n"
            "from tfx_bridge.components.pytorch_model_importer import source\n"
            "from tfx_bridge.components.pytorch_model_importer.errors import ImporterError\n"
            "try:\n"
            "    source.lazy_torch()\n"
            "except ImporterError as e:\n"
            "    assert \"pip install 'tfx-bridge[onnx]'\" in str(e), e\n"
            "else:\n"
            "    raise SystemExit('no error')\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def _imports(folder: str):
    """(file relative to the root, line, imported module) for every import under
    ``folder``; ``from a import b`` counts as both ``a`` and ``a.b``."""
    import ast

    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    targets = [node.module or ""]
                    targets += [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                else:
                    continue
                for target in targets:
                    yield os.path.relpath(path, ROOT), node.lineno, target


def test_components_import_only_the_shared_layer_never_each_other():
    """A module under components/<a>/ may use tfx_bridge.* but no components.<b>."""
    bad = []
    for rel, line, target in _imports("components"):
        component = rel.split(os.sep)[1]
        parts = target.split(".")
        if parts[:2] == ["tfx_bridge", "components"] and len(parts) > 2 \
                and parts[2] != component:
            bad.append(f"{rel}:{line} imports {target}")
    assert not bad, "\n".join(sorted(set(bad)))


def test_converter_package_imports_nothing_else_from_the_project():
    """onnx_tf/ is a library of its own: the only tfx_bridge modules it imports are
    its own (tfx_bridge.onnx_tf.*), and never TFX."""
    bad = [f"{rel}:{line} imports {target}" for rel, line, target in _imports("onnx_tf")
           if (target.split(".")[0] == "tfx_bridge"
               and not (target == "tfx_bridge.onnx_tf"
                        or target.startswith("tfx_bridge.onnx_tf.")))
           or target == "tfx" or target.startswith("tfx.")]
    assert not bad, "\n".join(sorted(set(bad)))


# The layers above the shared one: tfx_bridge/ may not import them.
UPPER_LAYERS = ("tfx_bridge.components", "tfx_bridge.pipelines", "tfx_bridge.kubeflow",
                "tfx_bridge.cli")


def test_shared_layer_never_imports_upward():
    """tfx_bridge/ is what every part may use: it imports no component, pipeline,
    Kubeflow module or the CLI (not even inside a function)."""
    bad = [f"{rel}:{line} imports {target}" for rel, line, target in _imports("tfx_bridge")
           if any(target == up or target.startswith(up + ".") for up in UPPER_LAYERS)]
    assert not bad, "\n".join(sorted(set(bad)))


# Local file calls that must not touch an artifact or data path (which may be a URI).
_LOCAL_FILE_CALL = __import__("re").compile(
    r"os\.path\.(exists|isdir|isfile|getsize)|os\.listdir|os\.makedirs|(?<![\w.])(?<!def )open\(|"
    r"\bglob\.|\bshutil\.|os\.walk|os\.rename|os\.replace|os\.remove")

# Where local file calls are allowed, and why: each touches only local files
# by construction (a staging copy, a temp folder, the library's own install).
ALLOWED_LOCAL_FILE_CALLS = {
    "tfx_bridge/storage/local.py": "the filesystem layer's local backend",
    "tfx_bridge/storage/fs.py": "local_copy / local_output: their local temp folders",
    "tfx_bridge/storage/folders.py": "symlink checks of local folders (object stores have none)",
    "cli/common.py": "the library log: a file descriptor needs a local file",
    "tfx_bridge/storage/staging.py": "its doctest, on a temp folder",
    "tfx_bridge/runlock.py": "flock on a lock file in a local folder (remote ones take none)",
    "tfx_bridge/portable.py": "the local Beam services' log files in the run's local workdir",
    "tfx_bridge/torch/distributed.py": "the ranks' error notes in a local temp folder",
    "tfx_bridge/child.py": "a warm child's stdout/stderr files in a temp folder; /proc for its RSS",
    "tfx_bridge/child_worker.py": "the stdout/stderr files its caller made for one run",
    "components/pytorch_model_importer/convert.py":
        "runs on local staging copies (import_model stages remote sources and outputs)",
    "components/pytorch_model_importer/detection_import.py":
        "runs on import_model's local staging copies, as convert.py's tensor route does",
    "components/pytorch_model_importer/onnx2tf/graph_rewrites.py":
        "lists onnx2tf's installed converters",
    "components/pytorch_model_importer/onnx2tf/convert.py":
        "runs on import_model's local work folder (private copies for onnx2tf)",
    "components/trt_optimizer/optimize.py":
        "optimize_local runs on local staging copies (optimize stages remote paths)",
    "components/trt_optimizer/report.py":
        "writes the report into optimize_local's local output (staged by optimize)",
    "components/trt_optimizer/candidates.py":
        "builds candidates in optimize_local's local work folder",
    "components/trt_optimizer/tflite.py": "builds in a local temp folder",
    "components/schema_guard/component.py": "a relative contract path checked at build time",
    "components/serving_pusher/inspect_model.py": "the child process loads a local copy",
    "components/serving_pusher/publish.py":
        "the local-disk publisher (flock, fsync, rename); s3 base paths take "
        "object_store_publisher.py",
    "pipelines/train_demo_model.py": "torch.save writes into a local_output staging folder",
}


def test_cores_touch_paths_only_through_the_filesystem_layer():
    offenders = []
    for folder in ("components", "tfx_bridge", "onnx_tf", "pipelines", "cli"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
                if rel in ALLOWED_LOCAL_FILE_CALLS:
                    continue
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        if _LOCAL_FILE_CALL.search(line.split("#", 1)[0]):
                            offenders.append(f"{rel}:{number}: {line.strip()}")
    assert not offenders, ("local file calls on paths that may be URIs (use tfx_bridge.storage.fs, "
                           "or stage locally and list the file here with why):\n"
                           + "\n".join(offenders))


def test_allowed_local_file_calls_list_only_existing_files():
    missing = [p for p in ALLOWED_LOCAL_FILE_CALLS if not os.path.isfile(os.path.join(ROOT, p))]
    assert not missing, missing


MAX_MODULE_LINES = 400


def test_modules_over_400_lines_state_why():
    """A module over ~400 lines says why in its docstring (a 'Size:' paragraph):
    otherwise it is split by stage or concern. Tests and benchmarks too."""
    import ast

    long = []
    for folder in ("components", "tfx_bridge", "onnx_tf", "pipelines", "kubeflow", "cli",
                   "tests", "benchmarks"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                if text.count("\n") <= MAX_MODULE_LINES:
                    continue
                doc = ast.get_docstring(ast.parse(text)) or ""
                if "\nSize: " not in "\n" + doc:
                    long.append(f"{os.path.relpath(path, ROOT)} ({text.count(chr(10))} lines)")
    assert not long, "split these, or say why they are this long (Size: ...):\n" + "\n".join(long)
