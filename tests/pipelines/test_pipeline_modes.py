"""create_pipeline's two modes, as built (no run): which components, wired how."""
from __future__ import annotations

import pytest

from tfx_bridge import schemas
from tfx_bridge.pipelines import pipeline as pipelines


def _ids(p):
    return [c.id for c in p.components]


def _inputs(component):
    return {k: c.producer_component_id for k, c in component.inputs.items()}


def test_create_pipeline_training_mode_wires_transform_trainer_and_importer(tmp_path):
    p = pipelines.create_pipeline(
        "t", str(tmp_path / "root"), str(tmp_path / "data"), None, str(tmp_path / "s"),
        schema_path=schemas.path(schemas.DEMO_SCHEMA),
        preprocessing_module=pipelines.DEMO_PREPROCESSING,
        trainer_module=pipelines.DEMO_TRAINER)
    assert "Transform" in _ids(p) and "PyTorchTrainer" in _ids(p)
    assert "research_model" not in _ids(p)
    by_id = {c.id: c for c in p.components}
    assert _inputs(by_id["PyTorchTrainer"]) == {
        "examples": "Transform", "transform_graph": "Transform",
        "schema": "ImportSchemaGen", "base_model": "latest_blessed_model"}
    assert _inputs(by_id["PyTorchModelImporter"]) == {
        "source_model": "PyTorchTrainer", "transform_graph": "Transform",
        "examples": "ParquetExampleGen", "transformed_examples": "Transform"}
    assert by_id["PyTorchTrainer"].exec_properties["run_fn"] == pipelines.DEMO_TRAINER


def test_create_pipeline_handover_with_transform_source_serves_that_graph(tmp_path):
    for folder in ("research", "research_tft"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "file").write_text(folder)
    p = pipelines.create_pipeline(
        "t", str(tmp_path / "root"), str(tmp_path / "data"), str(tmp_path / "research"),
        str(tmp_path / "s"), preprocessing_module=pipelines.DEMO_PREPROCESSING,
        transform_source=str(tmp_path / "research_tft"),
        module_class="tfx_bridge.pipelines.demo_models:CtrTransformed",
        inputs=["price_z:float32:-1"], output_names=["score", "experts"])
    by_id = {c.id: c for c in p.components}
    assert "PyTorchTrainer" not in by_id
    importer = _inputs(by_id["PyTorchModelImporter"])
    assert importer["source_model"] == "research_model"
    # The graph the team trained on is the one served; the pipeline's own Transform
    # output is not paired with it for the skew check.
    assert importer["transform_graph"] == "research_transform_graph"
    assert "transformed_examples" not in importer


@pytest.mark.parametrize("kwargs, message", [
    ({"model_source": None}, "Give trainer_module .* or model_source"),
    ({"model_source": "m", "trainer_module": pipelines.DEMO_TRAINER}, "not both"),
    ({"model_source": None, "trainer_module": pipelines.DEMO_TRAINER},
     "give preprocessing_module too"),
    ({"model_source": None, "trainer_module": pipelines.DEMO_TRAINER,
      "preprocessing_module": pipelines.DEMO_PREPROCESSING, "transform_source": "t"},
     "transform_source is for hand-over mode"),
])
def test_create_pipeline_conflicting_modes_refused(tmp_path, kwargs, message):
    model_source = kwargs.pop("model_source")
    with pytest.raises(ValueError, match=message):
        pipelines.create_pipeline("t", str(tmp_path), str(tmp_path), model_source,
                                  str(tmp_path / "s"), **kwargs)


def test_create_pipeline_model_name_where_the_config_goes_refused_naming_the_fix(tmp_path):
    from tfx_bridge.pipelines.config import PipelineConfigError

    with pytest.raises(PipelineConfigError, match=r"sixth argument is a PipelineConfig, not "
                       r"'ctr': pass run settings by name \(model_name=\.\.\."):
        pipelines.create_pipeline("t", str(tmp_path), str(tmp_path), None,
                                  str(tmp_path / "s"), "ctr")


def test_create_pipeline_beam_runner_checked_first_and_its_options_passed(tmp_path):
    from tfx_bridge.beam_runners import BeamSettings, RunnerSettingsError

    args = (str(tmp_path / "root"), str(tmp_path / "data"), None, str(tmp_path / "s"))
    with pytest.raises(RunnerSettingsError, match="--flink_version 1.12 is not one"):
        pipelines.create_pipeline("t", *args, beam_runner=BeamSettings(
            "flink", ("--flink_master=flink:8081", "--flink_version=1.12")))
    p = pipelines.create_pipeline(
        "t", *args, schema_path=schemas.path(schemas.DEMO_SCHEMA),
        preprocessing_module=pipelines.DEMO_PREPROCESSING,
        trainer_module=pipelines.DEMO_TRAINER, custom_config={"num_workers": 2},
        beam_runner=BeamSettings("portable", workers=2, job_endpoint="jobs:8099",
                                 environment_config="pool:50000"),
        beam_pipeline_args=["--s3_region_name=eu-west-1"])
    assert p.beam_pipeline_args[:4] == [
        "--runner=PortableRunner", "--job_endpoint=jobs:8099",
        "--environment_type=EXTERNAL", "--environment_config=pool:50000"]
    assert p.beam_pipeline_args[-1] == "--s3_region_name=eu-west-1"
    trainer = {c.id: c for c in p.components}["PyTorchTrainer"]
    assert '"num_workers": 2' in trainer.exec_properties["custom_config"]


def test_create_pipeline_config_with_settings_reaches_each_component(tmp_path):
    import json

    from tfx_bridge.pipelines.config import PipelineConfig, PipelineConfigError

    args = (str(tmp_path / "root"), str(tmp_path / "data"), None, str(tmp_path / "s"))
    config = PipelineConfig(preprocessing_module=pipelines.DEMO_PREPROCESSING,
                            trainer_module=pipelines.DEMO_TRAINER, train_steps=7,
                            optimizer_iterations=12, model_name="ctr_v2")
    p = pipelines.create_pipeline("t", *args, config, schema_path=schemas.path(
        schemas.DEMO_SCHEMA), evaluate=False)
    by_id = {c.id: c for c in p.components}
    assert "Evaluator" not in by_id and "latest_blessed_model" not in by_id
    assert json.loads(by_id["PyTorchTrainer"].exec_properties["train_args"]) == {"num_steps": 7}
    assert json.loads(by_id["TrtOptimizer"].exec_properties["config"])["iterations"] == 12
    assert json.loads(by_id["ServingPusher"].exec_properties["config"])["model_name"] == "ctr_v2"
    with pytest.raises(PipelineConfigError, match=r"unknown settings \['train_step'\]"):
        pipelines.create_pipeline("t", *args, config, train_step=5)
