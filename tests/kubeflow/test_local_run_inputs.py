"""The local Kubeflow runner's inputs: a spec that is not JSON is refused (exit 2), and
the image's paths (its schemas folder) map to this install's, so README's compiled
spec runs here too."""
from __future__ import annotations

import json
import os

import pytest

from tfx_bridge.kubeflow import local_run
from tfx_bridge.kubeflow.compile import IMAGE_SCHEMAS


def test_local_run_spec_not_json_refused_exit_2(tmp_path, capsys):
    (tmp_path / "p.json").write_text("pipelineSpec: {}")
    assert local_run.main([str(tmp_path / "p.json"), str(tmp_path / "root")]) == 2
    err = capsys.readouterr().err
    assert "is not JSON" in err and "compile-kfp --output FILE" in err
    assert "Traceback" not in err and not (tmp_path / "root").exists()


def test_local_run_bad_map_path_refused_exit_2(tmp_path, capsys):
    (tmp_path / "p.json").write_text("{}")
    assert local_run.main([str(tmp_path / "p.json"), str(tmp_path / "r"), "--map-path",
                           "/models"]) == 2
    assert "give IMAGE_PREFIX=LOCAL_FOLDER" in capsys.readouterr().err


def test_local_run_image_schema_paths_map_to_this_install_inside_json_configs_too():
    path_map = local_run.default_path_map()
    config = json.dumps({"contract_path": IMAGE_SCHEMAS + "demo.contract.yaml"})
    mapped = local_run._mapped({"config": {"stringValue": config},
                                "schema_file": {"stringValue": IMAGE_SCHEMAS +
                                                "demo.schema.pbtxt"},
                                "steps": {"intValue": "3"}}, path_map)
    assert os.path.isfile(json.loads(mapped["config"]["stringValue"])["contract_path"])
    assert os.path.isfile(mapped["schema_file"]["stringValue"])
    assert mapped["steps"] == {"intValue": "3"}


@pytest.mark.parametrize("held", ["root", "model"])
def test_local_run_while_a_run_holds_its_root_or_model_exit_4_naming_it(tmp_path, capsys,
                                                                       hold_run_lock, held):
    """The locks `tfx-bridge run` takes: refused before any task runs."""
    from tfx_bridge.runlock import LOCK_FILE, model_lock_name

    golden = os.path.join(os.path.dirname(__file__), "golden", "pipeline_train.json")
    with open(golden) as f:
        text = f.read()
    spec = tmp_path / "pipeline.json"
    # The spec's serving base path, on this machine.
    spec.write_text(text.replace('\\"base_path\\": \\"/models\\"',
                                 f'\\"base_path\\": \\"{tmp_path / "serving"}\\"'))
    assert str(tmp_path / "serving") in spec.read_text()
    proc = hold_run_lock(*((tmp_path / "root", LOCK_FILE) if held == "root"
                           else (tmp_path / "serving", model_lock_name("ctr"))))
    assert local_run.main([str(spec), str(tmp_path / "root")]) == 4
    err = capsys.readouterr().err
    assert f"pid {proc.pid}" in err and "tfx-bridge run (the 02:00 cron)" in err, err
    assert "Traceback" not in err
    assert os.listdir(tmp_path / "root") == [LOCK_FILE]  # no task ran
