"""``tfx-bridge push`` and ServingPusher's executor take one route: the same serving
layout, the same result, and the same "nothing new" decision (by the importer's
source digest when an imported model is given, not by the SavedModel's bytes)."""
from __future__ import annotations

import json
import os

import pytest

from tfx_bridge import cli
from tfx_bridge.components.serving_pusher.config import PusherConfig

SOURCE_DIGEST = "ab" * 32


def _model_folder(folder, saved_model, report: dict) -> str:
    """A Model artifact folder: Format-Serving/ and the report the optimizer writes."""
    os.makedirs(folder)
    os.symlink(saved_model, os.path.join(folder, "Format-Serving"))
    with open(os.path.join(folder, "report.json"), "w") as f:
        json.dump(report, f)
    return str(folder)


def _push_by_component(config: PusherConfig, model: str, imported: str, out: str):
    """The executor's Do over artifacts at these folders; returns the PushedModel."""
    from tfx.types import standard_artifacts

    from tfx_bridge.components.serving_pusher.executor import Executor
    from tfx_bridge.components.serving_pusher.spec import (
        CONFIG_KEY,
        IMPORTED_MODEL_KEY,
        MODEL_KEY,
        PUSHED_MODEL_KEY,
    )

    def artifact(kind, uri):
        a = kind()
        a.uri = uri
        return a

    os.makedirs(out)
    pushed = artifact(standard_artifacts.PushedModel, out)
    Executor().Do({MODEL_KEY: [artifact(standard_artifacts.Model, model)],
                   IMPORTED_MODEL_KEY: [artifact(standard_artifacts.Model, imported)]},
                  {PUSHED_MODEL_KEY: [pushed]}, {CONFIG_KEY: config.to_json()})
    return pushed


def _push_by_cli(capfd, base: str, model: str, imported: str) -> dict:
    code = cli.main(["push", "--model", model, "--imported-model", imported, "--base-path",
                     base, "--model-name", "ctr", "--warmup-records", "3", "--json",
                     "--quiet"])
    out, err = capfd.readouterr()
    assert code == cli.EXIT_OK, err
    return json.loads(out.strip().splitlines()[-1])


def _tree(root: str) -> dict:
    """Relative path -> bytes of every file under root, the root's own path blanked
    (the manifest names the folder it mounts)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read().replace(root.encode(), b"<base>")
    return out


@pytest.mark.slow
def test_cli_push_and_component_same_layout_and_same_nothing_new(tmp_path, capfd,
                                                                 scaled_saved_model):
    report = {"blessed": True, "requires_gpu": False, "serving_flags": []}
    imported = _model_folder(tmp_path / "imported", scaled_saved_model(
        str(tmp_path / "onnx_free")), {"blessed": True, "source_digest": SOURCE_DIGEST})
    first = _model_folder(tmp_path / "first", scaled_saved_model(str(tmp_path / "a")), report)
    # Another optimizer run over the same sources: other bytes, the same model.
    again = _model_folder(tmp_path / "again",
                          scaled_saved_model(str(tmp_path / "b"), scale=3.0), report)
    by_component, by_cli = str(tmp_path / "component"), str(tmp_path / "cli")
    config = PusherConfig(by_component, "ctr", warmup_records=3)

    pushed = _push_by_component(config, first, imported, str(tmp_path / "pushed1"))
    summary = _push_by_cli(capfd, by_cli, first, imported)
    props = {k: pushed.get_custom_property(k) for k in
             ("pushed", "pushed_version", "pushed_destination", "push_reason")}
    assert props["pushed"] == 1 and summary["pushed"] is True
    assert props["pushed_version"] == str(summary["version"]) == "1"
    assert props["push_reason"] == summary["reason"]
    assert os.path.relpath(props["pushed_destination"], by_component) == \
        os.path.relpath(summary["destination"], by_cli)
    push_json = json.load(open(os.path.join(pushed.uri, "push.json")))
    assert push_json["labels"] == summary["labels"] == {"stable": 1}

    pushed = _push_by_component(config, again, imported, str(tmp_path / "pushed2"))
    summary = _push_by_cli(capfd, by_cli, again, imported)
    for reason in (pushed.get_custom_property("push_reason"), summary["reason"]):
        assert reason.startswith("identical to version 1"), reason
    assert pushed.get_custom_property("pushed_version") == str(summary["version"]) == "1"

    layout_a, layout_b = _tree(by_component), _tree(by_cli)
    assert sorted(layout_a) == sorted(layout_b)
    assert "ctr/1/saved_model.pb" in layout_a and "ctr/2" not in {
        os.path.dirname(p) for p in layout_a}
    for path in sorted(layout_a):
        assert layout_a[path] == layout_b[path], path
    state = json.loads(layout_b["ctr/.state.json"])
    assert state["digests"] == {"1": f"source:{SOURCE_DIGEST} flags:"}


def test_cli_push_imported_model_folder_missing_exit_2_naming_it(tmp_path, capfd,
                                                                 scaled_saved_model):
    model = _model_folder(tmp_path / "model", scaled_saved_model(str(tmp_path / "a")),
                          {"blessed": True})
    missing = str(tmp_path / "imported-typo")
    code = cli.main(["push", "--model", model, "--imported-model", missing, "--base-path",
                     str(tmp_path / "serving"), "--model-name", "ctr", "--quiet"])
    _, err = capfd.readouterr()
    assert code == cli.EXIT_BAD_INPUT, err
    assert f"The imported model folder {missing} does not exist" in err
    assert not os.path.exists(tmp_path / "serving" / "ctr")


@pytest.mark.parametrize("verdict", [{"blessed": False}, {}])
def test_cli_push_imported_model_not_blessed_or_without_verdict_refused_exit_1(
        tmp_path, capfd, scaled_saved_model, verdict):
    model = _model_folder(tmp_path / "model", scaled_saved_model(str(tmp_path / "a")),
                          {"blessed": True})
    imported = _model_folder(tmp_path / "imported", scaled_saved_model(str(tmp_path / "b")),
                             {**verdict, "source_digest": SOURCE_DIGEST})
    code = cli.main(["push", "--model", model, "--imported-model", imported, "--base-path",
                     str(tmp_path / "serving"), "--model-name", "ctr", "--json", "--quiet"])
    out, err = capfd.readouterr()
    assert code == cli.EXIT_CHECK_FAILED, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["pushed"] is False and "importer" in summary["reason"], summary["reason"]
    assert not os.path.isdir(tmp_path / "serving" / "ctr" / "1")


def test_cli_push_target_cores_and_threads_reach_the_server_flags(tmp_path, capfd,
                                                                    scaled_saved_model):
    from tfx_bridge.components.serving_pusher import base_layout

    model = scaled_saved_model(str(tmp_path / "model"))
    base = tmp_path / "serving"
    code = cli.main(["push", "--model", model, "--base-path", str(base), "--model-name",
                     "m", "--target-cores", "3", "--inter-op-parallelism", "1",
                     "--cpu-allocator", "malloc", "--quiet"])
    assert code == 0, capfd.readouterr().err
    manifest = (base / base_layout.K8S_MANIFEST).read_text()
    assert "--tensorflow_intra_op_parallelism=3" in manifest
    assert "--tensorflow_inter_op_parallelism=1" in manifest
    assert "TF_CPU_ALLOCATOR_USE_BFC" not in manifest  # malloc: TF's own default


def test_cli_push_unknown_cpu_allocator_usage_error_before_imports(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["push", "--model", str(tmp_path), "--base-path", str(tmp_path / "s"),
                  "--model-name", "m", "--cpu-allocator", "jemalloc"])
    assert e.value.code == 2
    assert "--cpu-allocator: invalid choice: 'jemalloc'" in capsys.readouterr().err
