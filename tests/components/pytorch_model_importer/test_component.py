"""PyTorchModelImporter as a component: a pipeline feeding stock Evaluator, the CLI."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

from tfx import v1 as tfx  # noqa: E402

from tfx_bridge import schemas  # noqa: E402
from tfx_bridge.artifacts import properties  # noqa: E402
from tfx_bridge.components import ParquetExampleGen, PyTorchModelImporter  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.errors import (  # noqa: E402
    ImporterConfigError,
)
from tfx_bridge.pipelines import demo_data, demo_models, pipeline, runner  # noqa: E402


@pytest.mark.slow
def test_pipeline_importer_model_feeds_stock_evaluator(tmp_path, ctr_reference):
    import tensorflow_model_analysis as tfma

    data = str(tmp_path / "data")
    demo_data.write_demo_spans(data, spans=[1], rows_per_span=400)
    weights = str(tmp_path / "research" / "ctr.pt")
    os.makedirs(os.path.dirname(weights))
    torch.manual_seed(0)
    torch.save(demo_models.CtrMoE().state_dict(), weights)

    gen = ParquetExampleGen(input_base=data, input_config=pipeline.span_input_config())
    schema = tfx.components.ImportSchemaGen(schema_file=schemas.path(schemas.DEMO_SCHEMA))
    research = tfx.dsl.Importer(source_uri=os.path.dirname(weights),
                                artifact_type=tfx.types.standard_artifacts.Model
                                ).with_id("research_output")
    importer = PyTorchModelImporter(
        source_kind="state_dict", source_model=research.outputs["result"],
        module_class="tfx_bridge.pipelines.demo_models:CtrMoE",
        inputs=demo_models.CTR_INPUTS, output_names=demo_models.CTR_OUTPUTS,
        schema=schema.outputs["schema"], examples=gen.outputs["examples"])
    eval_config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_tf_example", label_key="clicked",
                                    prediction_key="score")],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name="ExampleCount"),
                                                 tfma.MetricConfig(class_name="AUC")])])
    evaluator = tfx.components.Evaluator(examples=gen.outputs["examples"],
                                         model=importer.outputs["model"],
                                         eval_config=eval_config)
    metadata = str(tmp_path / "m.sqlite")
    p = tfx.dsl.Pipeline(
        pipeline_name="import-eval", pipeline_root=str(tmp_path / "root"),
        components=[gen, schema, research, importer, evaluator],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            metadata))
    runner.run_local(p)

    model = [m for m in runner.latest_artifacts(metadata, "Model")
             if "PyTorchModelImporter" in m.uri][0]
    assert model.custom_properties["blessed"].int_value == 1
    assert model.custom_properties["tfx_version"].string_value
    with open(os.path.join(model.uri, "report.json")) as f:
        report = json.load(f)
    assert report["inputs_from"] == "examples"
    # The number in MLMD is the number measured and written in the report.
    assert report["max_abs_error"] is not None
    assert properties.get_float(model, "max_abs_error") == report["max_abs_error"]
    evaluation = runner.latest_artifacts(metadata, "ModelEvaluation")[0]
    result = tfma.load_metrics(os.path.join(evaluation.uri, "metrics"))
    metrics = {k.name: v for record in result for mk in record.metric_keys_and_values
               for k, v in [(mk.key, mk.value)]}
    # Evaluator's numbers are the ones the research team's own model gives on the
    # eval split (TFMA's AUC is a 10,000-threshold approximation).
    from sklearn.metrics import roc_auc_score

    demo_eval_records, torch_ctr_scores = ctr_reference

    examples = runner.latest_artifacts(metadata, "Examples")[0]
    rows = demo_eval_records(examples.uri)
    scores, _ = torch_ctr_scores(weights, rows)
    assert metrics["example_count"].double_value.value == len(rows["clicked"])
    assert metrics["auc"].double_value.value == pytest.approx(
        roc_auc_score(rows["clicked"], scores.reshape(-1)), abs=2e-3)


def test_component_build_checks_refuse_bad_config():
    with pytest.raises(ImporterConfigError, match=r"needs module_class"):
        PyTorchModelImporter(source_kind="state_dict", source_path="/m.pt",
                             inputs=["x:float32:-1,8"], output_names=["y"])
    with pytest.raises(ImporterConfigError, match=r"first dimension is the batch"):
        PyTorchModelImporter(source_kind="onnx", source_path="/m.onnx",
                             inputs=["x:float32:8"], output_names=["y"])
    with pytest.raises(ImporterConfigError, match=r"name every model output"):
        PyTorchModelImporter(source_kind="onnx", source_path="/m.onnx",
                             inputs=["x:float32:-1,8"], output_names=[])


@pytest.mark.slow
def test_cli_import_model_over_tolerance_exit_1(tmp_path, capfd):
    from tfx_bridge import cli

    path = str(tmp_path / "mlp.torchscript")
    torch.jit.script(demo_models.build("mlp")).save(path)
    code = cli.main(["import-model", "--torchscript", path, "--input", "x:float32:-1,8",
                     "--output-name", "logits", "--output", str(tmp_path / "out"), "--atol",
                     "0", "--json"])
    out, err = capfd.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    if summary["max_abs_error"] == 0.0:
        pytest.fail("conversion was bit-exact; atol=0 cannot show the gate")
    assert code == 1 and summary["blessed"] is False
    assert "Traceback" not in err
    assert "| **NO** |" in out
    assert os.path.exists(tmp_path / "out" / "Format-Serving" / "saved_model.pb")
    assert json.load(open(tmp_path / "out" / "report.json"))["blessed"] is False
