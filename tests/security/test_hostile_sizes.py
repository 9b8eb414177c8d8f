"""Round 2 (docs/TRUST.md, 16-19): declared sizes checked against stated limits
(tfx_bridge.limits) before anything is allocated, and a spec's module refused
before its code runs where it can be. Memory cases run the CLI in a child
(rss_probe.py) and bound its peak RSS growth."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx_bridge import limits  # noqa: E402
from tfx_bridge.torch import class_path  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402

PROBE = os.path.join(os.path.dirname(__file__), "rss_probe.py")
MB = 1 << 20


def _probe(*args, cap_mb: int = 2048):
    """[(peak RSS growth, exit code)] of each CLI command (separated by ``--then``) in
    one child, whose address space may grow by ``cap_mb`` at most (a claim that is
    allocated fails there, not here); and the child's stderr."""
    env = dict(os.environ, RSS_PROBE_CAP_MB=str(cap_mb), RSS_PROBE_IMPORTS="torch,onnx")
    proc = subprocess.run([sys.executable, PROBE, *args], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, f"killed or crashed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    found = [(int(g), int(c)) for g, c in re.findall(r"RSS_GROWTH (\d+) EXIT (\d+)",
                                                     proc.stdout)]
    assert found, proc.stdout[-2000:] + proc.stderr[-2000:]
    return found, proc.stderr


@pytest.fixture
def linear_weights(tmp_path):
    path = tmp_path / "w.pt"
    torch.save(torch.nn.Linear(3, 2).state_dict(), path)
    return str(path)


def test_import_model_declared_sizes_over_a_limit_refused_before_allocating(
        tmp_path, linear_weights):
    common = ["import-model", "--state-dict", linear_weights, "--module-class",
              "torch.nn:Linear", "--output-name", "y", "--output", str(tmp_path / "out")]
    huge_input = [*common, "--module-kwargs", '{"in_features": 3, "out_features": 2}',
                  "--input", "x:float32:-1,100000000"]
    huge_module = [*common, "--input", "x:float32:-1,3", "--module-kwargs",
                   '{"in_features": 3, "out_features": 10000000000000}']
    found, err = _probe(*huge_input, "--then", *huge_module)
    assert [code for _, code in found] == [2, 2], err
    assert "one row needs 100,000,000 elements; the limit is 67,108,864 per check input" in err
    assert "declares 160,000,000,000,000 bytes of parameters; the limit is" in err
    assert "Traceback" not in err
    assert all(growth < 200 * MB for growth, _ in found)  # refused, not allocated
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("depth", [30_000, 200_000])
def test_json_nested_deeper_than_the_limit_refused_not_recursion_error(tmp_path, depth):
    text = "[" * depth + "]" * depth
    with pytest.raises(limits.LimitError, match=rf"nests {depth} levels deep; the limit is 64"):
        limits.loads_json(text, "--module-kwargs")
    folder = tmp_path / "Format-PyTorch"
    folder.mkdir()
    (folder / torch_model.SPEC_FILE).write_text('{"module_kwargs": ' + text + "}")
    with pytest.raises(limits.LimitError, match="model_spec.json nests"):
        torch_model.read_spec(str(folder))


def test_json_strings_with_brackets_do_not_count_as_nesting():
    text = json.dumps({"a": "[" * 1000, "b": ["]" * 10, {"c": "\\\"["}]})
    assert limits.loads_json(text, "x")["a"] == "[" * 1000
    assert limits.json_depth(text.encode()) == 3


def _onnx_with_big_external_weight(folder, elements: int, sparse_bytes: int) -> str:
    import onnx
    from onnx import helper

    weight = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[elements])
    weight.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(elements * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [elements])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [elements])], [weight])
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "m.onnx")
    with open(path, "wb") as f:
        f.write(helper.make_model(graph).SerializeToString())
    with open(os.path.join(folder, "w.bin"), "wb") as f:
        f.truncate(sparse_bytes)  # a sparse file: its size costs no disk
    return path


def _edit_external_data(path: str, edit) -> None:
    """``edit(entries)`` on the weight's external_data fields, saved in place."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    edit(model.graph.initializer[0].external_data)
    onnx.save(model, path)


def test_onnx_declared_weights_over_the_parameter_limit_refused_before_loading(
        tmp_path, monkeypatch):
    from tfx_bridge.components.pytorch_model_importer.source import check_external_data

    path = _onnx_with_big_external_weight(tmp_path / "m", 1 << 29, 2 << 30)  # 2 GiB
    monkeypatch.setenv(limits.PARAMETER_BYTES_ENV, str(1 << 30))
    with pytest.raises(limits.LimitError, match=r"m\.onnx declares 2,147,483,648 bytes of "
                       r"parameters; the limit is 1,073,741,824"):
        check_external_data(path)


def test_onnx_external_data_file_ending_early_refused(tmp_path):
    from tfx_bridge.components.pytorch_model_importer.errors import ModelSourceError
    from tfx_bridge.components.pytorch_model_importer.source import check_external_data

    path = _onnx_with_big_external_weight(tmp_path / "m", 1024, 100)
    with pytest.raises(ModelSourceError, match=r"'w' needs bytes up to 4,096 of 'w\.bin', "
                       r"which holds 100"):
        check_external_data(path)


def test_onnx_external_data_without_a_length_checked_against_its_tensor(tmp_path):

    from tfx_bridge.components.pytorch_model_importer.errors import ModelSourceError
    from tfx_bridge.components.pytorch_model_importer.source import check_external_data

    path = _onnx_with_big_external_weight(tmp_path / "m", 1024, 10)

    def drop_length(entries):
        del entries[[e.key for e in entries].index("length")]

    _edit_external_data(path, drop_length)
    with pytest.raises(ModelSourceError, match=r"'w' needs bytes up to 4,096 of 'w\.bin', "
                       r"which holds 10"):
        check_external_data(path)


def test_onnx_external_data_location_with_a_nul_byte_refused(tmp_path):

    from tfx_bridge.components.pytorch_model_importer.errors import ModelSourceError
    from tfx_bridge.components.pytorch_model_importer.source import check_external_data

    path = _onnx_with_big_external_weight(tmp_path / "m", 4, 16)
    _edit_external_data(path, lambda entries: setattr(entries[0], "value", "w\0.bin"))
    with pytest.raises(ModelSourceError, match=r"'w' -> 'w\\x00\.bin' \(not a file name\)"):
        check_external_data(path)


def test_module_class_checked_in_its_source_before_it_is_imported(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    (tmp_path / "hostile_mod.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "s = 'not a class'\n"
        "def build():\n    pass\n"
        "import torch\n"
        "class Net(torch.nn.Module):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, needle in (("hostile_mod:s", "binds 's' to a constant value"),
                         ("hostile_mod:build", "defines 'build' as a function"),
                         ("hostile_mod:Missing", "has no top-level 'Missing'"),
                         ("hostile_mod.py:Net", "cannot import it (no module named "
                          "'hostile_mod.py')"),
                         ("this:s", "binds 's' to a constant value")):
        with pytest.raises(torch_model.TorchModelError, match=re.escape(needle)):
            torch_model.import_module_class(name)
    assert not marker.exists()  # none of them ran the module's code
    monkeypatch.setenv(class_path.ALLOWED_MODULES_ENV, "mypkg, tfx_bridge")
    with pytest.raises(torch_model.TorchModelError, match="hostile_mod is not in "
                       "TFX_BRIDGE_ALLOWED_MODULES"):
        torch_model.import_module_class("hostile_mod:Net")
    assert not marker.exists()
    monkeypatch.delenv(class_path.ALLOWED_MODULES_ENV)
    assert issubclass(torch_model.import_module_class("hostile_mod:Net"), torch.nn.Module)
    assert marker.exists()  # a class: imported, as trusted code (docs/TRUST.md)


def test_json_depth_scan_of_unterminated_escaped_quotes_returns_not_hangs():
    # 1 MB of \" after an opening quote: a scan retrying from every quote is quadratic.
    code = ("from tfx_bridge import limits\n"
            "print(limits.json_depth(b'\"' + b'\\\\\"' * 500_000))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stderr[-2000:]
