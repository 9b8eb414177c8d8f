"""Transform and PyTorch training in the pipeline, and serving the Transform graph.

One LocalDagRunner run (ParquetExampleGen -> ImportSchemaGen -> Transform with
a user's preprocessing module file: the demo preprocessing_fn plus one
fixed-length vector feature -> PyTorchTrainer with the demo run_fn on two
torch.distributed processes) feeds every
test here: the reader on Transform's output, the trainer's artifact, seeded
bit-identical training, warm start, and the hand-over import of weights
trained on Transform's output with its transform graph (raw features served,
the skew check, an unseen country served as Transform's OOV bucket, a stock
torch.nn model on the vector feature).
"""
from __future__ import annotations

import json
import os
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402
import tensorflow_transform as tft  # noqa: E402
from tfx import v1 as tfx  # noqa: E402

from tfx_bridge import schemas  # noqa: E402
from tfx_bridge.artifacts import properties  # noqa: E402
from tfx_bridge.artifacts.examples import read_records  # noqa: E402
from tfx_bridge.artifacts.tensorspec import parse_input_specs  # noqa: E402
from tfx_bridge.components.pytorch_model_importer import convert  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.errors import (  # noqa: E402
    ImporterConfigError,
)
from tfx_bridge.components.pytorch_model_importer.report import check_table  # noqa: E402
from tfx_bridge.components.pytorch_trainer import PyTorchTrainer  # noqa: E402
from tfx_bridge.components.pytorch_trainer import executor as trainer_executor  # noqa: E402
from tfx_bridge.components.pytorch_trainer.errors import RunFnError  # noqa: E402
from tfx_bridge.pipelines import demo_data, demo_preprocessing, demo_trainer, runner  # noqa: E402
from tfx_bridge.pipelines import pipeline as pipelines  # noqa: E402
from tfx_bridge.storage import fs  # noqa: E402
from tfx_bridge.torch import model as torch_model  # noqa: E402
from tfx_bridge.torch.examples import ExamplesDataset, features_from_schema  # noqa: E402

pytestmark = pytest.mark.slow

# A user's module *file* (TFX packages it for Transform): the demo's features plus
# "price_ctr", a [batch, 2] float vector, for a model this library did not write.
USER_PREPROCESSING = '''import tensorflow as tf

from tfx_bridge.pipelines import demo_preprocessing


def preprocessing_fn(inputs):
    outputs = demo_preprocessing.preprocessing_fn(inputs)
    outputs["price_ctr"] = tf.stack(
        [outputs["price_z"], tf.cast(outputs["user_ctr"], tf.float32)], axis=1)
    return outputs
'''
VECTOR_FEATURE = "price_ctr"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Transform and PyTorchTrainer run once through LocalDagRunner."""
    work = tmp_path_factory.mktemp("training")
    data = str(work / "data")
    demo_data.write_demo_spans(data, spans=[1], rows_per_span=900)
    metadata = str(work / "metadata.sqlite")
    example_gen, _, schema_gen, schema_guard = pipelines.data_components(
        data, schema_path=schemas.path(schemas.DEMO_SCHEMA))
    module = work / "user_preprocessing.py"
    module.write_text(USER_PREPROCESSING)
    transform = pipelines.transform_component(example_gen, schema_gen, schema_guard,
                                              str(module))
    trainer = PyTorchTrainer(examples=transform.outputs["transformed_examples"],
                             transform_graph=transform.outputs["transform_graph"],
                             run_fn=pipelines.DEMO_TRAINER,
                             train_args=tfx.proto.TrainArgs(num_steps=60),
                             eval_args=tfx.proto.EvalArgs(num_steps=None),
                             custom_config={"seed": 3, "num_workers": 2})
    runner.run_local(tfx.dsl.Pipeline(
        pipeline_name="training-test", pipeline_root=str(work / "root"),
        components=[example_gen, schema_gen, schema_guard, transform, trainer],
        metadata_connection_config=(
            tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata))))

    def latest(type_name, part):
        return [a for a in runner.latest_artifacts(metadata, type_name) if part in a.uri][0]

    return {"work": work, "metadata": metadata,
            "graph": latest("TransformGraph", "/Transform/").uri,
            "transformed": latest("Examples", "/Transform/").uri,
            "raw": latest("Examples", "/ParquetExampleGen/").uri,
            "model": latest("Model", "/PyTorchTrainer/")}


def _fn_args(trained, out: str, steps: int = 30, base_model=None, seed: int = 3):
    uri = trained["transformed"]
    return types.SimpleNamespace(
        custom_config={"seed": seed}, transform_output=trained["graph"],
        train_files=[os.path.join(uri, "Split-train", "*")],
        eval_files=[os.path.join(uri, "Split-eval", "*")],
        base_model=base_model, train_steps=steps, serving_model_dir=out)


def test_reader_transform_output_typed_and_z_scored(trained):
    output = tft.TFTransformOutput(trained["graph"])
    features = features_from_schema(output.transformed_metadata.schema,
                                    {"item_id": "int32", "hour": "int32",
                                     "country_id": "int32", "clicked": "float32"})
    assert set(features) == set(demo_preprocessing.MODEL_FEATURES) | {"clicked",
                                                                      VECTOR_FEATURE}
    batches = list(ExamplesDataset(trained["transformed"], "train", features, batch_size=64))
    rows = {k: torch.cat([b[k] for b in batches]).numpy() for k in features}
    vocab = output.vocabulary_size_by_name(demo_preprocessing.COUNTRY_VOCABULARY)
    assert vocab == len(demo_data.COUNTRIES)
    assert rows["country_id"].dtype == np.int32 and set(rows["country_id"]) <= set(range(vocab))
    # z-score over the analysed (train) split: mean 0, deviation 1.
    assert abs(rows["price_z"].mean()) < 1e-4 and abs(rows["price_z"].std() - 1) < 1e-3
    assert set(np.unique(rows["clicked"])) <= {0.0, 1.0}
    assert set(np.unique(rows["item_seen"])) == {0, 1}
    # A fixed-length list feature arrives as a 2-D tensor.
    assert rows[VECTOR_FEATURE].shape == (len(rows["price_z"]), 2)
    np.testing.assert_array_equal(rows[VECTOR_FEATURE][:, 0], rows["price_z"])


def test_trainer_pipeline_model_has_spec_weights_and_exact_metrics(trained):
    model = trained["model"]
    folder = torch_model.folder_of(model.uri)
    spec = torch_model.read_spec(folder)
    assert spec.module_class == demo_trainer.MODULE_CLASS
    assert [s.name for s in parse_input_specs(spec.inputs)] == list(
        demo_preprocessing.MODEL_FEATURES)
    assert spec.outputs == ["score", "experts"]
    metrics = json.loads(fs.read_text(fs.join(folder, torch_model.METRICS_FILE)))
    # MLMD holds exactly what the run_fn measured.
    assert properties.get_float(model, "eval_auc") == metrics["eval_auc"]
    assert properties.get_float(model, "eval_loss") == metrics["eval_loss"]
    assert model.custom_properties["retrained"].int_value == 1
    assert torch_model.trained_on(folder) == trained["transformed"]
    # Two ranks, one model: rank 0 saved it; between them they read each train
    # record once in the first epoch.
    assert sorted(fs.listdir(folder)) == sorted([
        torch_model.WEIGHTS_FILE, torch_model.SPEC_FILE, torch_model.METRICS_FILE,
        torch_model.TRAINED_ON_FILE])
    records = sum(1 for _ in tf.data.TFRecordDataset(
        fs.glob(fs.join(trained["transformed"], "Split-train", "*")), "GZIP"))
    assert properties.get_float(model, "train_records_per_epoch") == records == \
        metrics["train_records_per_epoch"]


def test_run_fn_same_data_and_seed_bit_identical_weights(trained, tmp_path):
    for name in ("a", "b"):
        demo_trainer.run_fn(_fn_args(trained, str(tmp_path / name)))
    a = torch_model.load_state_dict(str(tmp_path / "a"))
    b = torch_model.load_state_dict(str(tmp_path / "b"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    demo_trainer.run_fn(_fn_args(trained, str(tmp_path / "c"), seed=4))
    c = torch_model.load_state_dict(str(tmp_path / "c"))
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_run_fn_warm_start_starts_from_base_weights(trained, tmp_path):
    base = torch_model.folder_of(trained["model"].uri)
    demo_trainer.run_fn(_fn_args(trained, str(tmp_path / "warm"), steps=1, base_model=base))
    before = torch_model.load_state_dict(base)
    after = torch_model.load_state_dict(str(tmp_path / "warm"))
    # One small step from the base: close to it, unlike a fresh initialisation.
    assert max(float((before[k] - after[k]).abs().max()) for k in before) < 0.05


def test_warm_start_shape_mismatch_names_parameter(trained, tmp_path):
    from tfx_bridge.pipelines.demo_models import CtrTransformed

    wider = CtrTransformed(countries=7, dim=3)
    with pytest.raises(torch_model.TorchModelError,
                       match=r"'item\.weight' has shape \(1000, 2\) in the base model, "
                             r"\(1000, 3\) in this one"):
        torch_model.warm_start(wider, torch_model.folder_of(trained["model"].uri))


def test_trainer_executor_same_examples_and_recipe_reemits_changed_recipe_trains(
        trained, tmp_path):
    from tfx.types import standard_artifacts

    def artifact(cls, uri):
        a = cls()
        a.uri = uri
        return a

    examples = artifact(standard_artifacts.Examples, trained["transformed"])
    examples.split_names = '["train", "eval"]'
    graph = artifact(standard_artifacts.TransformGraph, trained["graph"])
    props = {"run_fn": pipelines.DEMO_TRAINER, "train_args": '{"num_steps": 5}',
             "eval_args": "{}", "custom_config": "null"}

    def train(name, base=None, **changes):
        out = artifact(standard_artifacts.Model, str(tmp_path / name))
        inputs = {"examples": [examples], "transform_graph": [graph]}
        if base is not None:
            inputs["base_model"] = [base]
        trainer_executor.Executor().Do(
            inputs, {"model": [out], "model_run": [artifact(standard_artifacts.ModelRun,
                                                            str(tmp_path / f"{name}-run"))]},
            {**props, **changes})
        return out

    first = train("first")
    assert first.get_int_custom_property("retrained") == 1
    again = train("again", base=first)  # same span, run_fn, settings, graph: no new model
    assert again.get_int_custom_property("retrained") == 0
    assert again.get_string_custom_property("warm_started_from") == \
        torch_model.folder_of(first.uri)
    a = torch_model.load_state_dict(torch_model.folder_of(again.uri))
    b = torch_model.load_state_dict(torch_model.folder_of(first.uri))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # Same span, changed settings: that shapes the model, so it trains.
    changed = train("changed", base=first, train_args='{"num_steps": 6}')
    assert changed.get_int_custom_property("retrained") == 1
    # A run_fn that no longer loads stops the run even where the model would be
    # re-emitted: the typo surfaces now, not on the next new span.
    with pytest.raises(RunFnError, match=r"the run_fn nosuchpkg\.train\.run_fn does not load: "
                       r"ImportError: Could not import requested module path "
                       r"'nosuchpkg\.train'\.$"):
        train("broken", base=first, run_fn="nosuchpkg.train.run_fn")


@pytest.mark.parametrize("workers,route", [(1, "module_file"), (1, "packaged"),
                                           (2, "packaged")])
def test_trainer_executor_run_fn_that_raises_named_with_the_users_line(trained, tmp_path,
                                                                       workers, route):
    """``module_file`` as given; ``packaged`` as a pipeline runs it: TFX's wheel of the
    module file, installed in a temp folder by every process that loads it (ranks
    too), and still named by the user's own file."""
    from tfx.components.util import udf_utils
    from tfx.types import standard_artifacts

    from tfx_bridge.components.pytorch_trainer.spec import MODULE_SOURCE_CONFIG

    module = tmp_path / "my_trainer.py"
    # Under two processes only rank 1 raises: the run fails with rank 1's error.
    # The Examples the trainer hands over are read with TF's reader (auto).
    module.write_text("from tfx_bridge.torch import distributed\n"
                      "from tfx_bridge.torch.examples import ExamplesDataset, Feature\n\n\n"
                      "def run_fn(fn_args):\n    steps = fn_args.train_steps\n"
                      "    reader = ExamplesDataset.from_patterns(fn_args.train_files, "
                      "{'price_z': Feature()}).reader\n"
                      "    if distributed.world()[0] == distributed.world()[1] - 1:\n"
                      "        raise ValueError(f'learning rate schedule needs {steps} > 10 "
                      "({reader} reader)')\n")
    rank = r"rank 1 of 2 failed: " if workers == 2 else r"raised "
    line = 9
    examples = standard_artifacts.Examples()
    examples.uri, examples.split_names = trained["transformed"], '["train", "eval"]'
    graph = standard_artifacts.TransformGraph()
    graph.uri = trained["graph"]
    out, run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    out.uri, run.uri = str(tmp_path / "model"), str(tmp_path / "run")
    config = {"num_workers": workers}
    loaded = {"module_file": str(module)}
    if route == "packaged":
        _, packaged = udf_utils.package_user_module_file(
            "PyTorchTrainer", str(module), str(tmp_path / "root"))
        loaded = {"module_path": packaged}
        config[MODULE_SOURCE_CONFIG] = str(module)
    with pytest.raises(RunFnError, match=rf"the run_fn {module}:? {rank}ValueError: learning "
                       rf"rate schedule needs 5 > 10 \(tf reader\) "
                       rf"\(at {module}:{line} in run_fn\)"):
        trainer_executor.Executor().Do(
            {"examples": [examples], "transform_graph": [graph]},
            {"model": [out], "model_run": [run]},
            {**loaded, "train_args": '{"num_steps": 5}', "eval_args": "{}",
             "custom_config": json.dumps(config)})


@pytest.fixture(scope="module")
def handed_over(trained, tmp_path_factory):
    """Hand-over mode: the research team trained on Transform's output with the reader
    and hands over weights plus that transform graph; the importer declares the model."""
    research = str(tmp_path_factory.mktemp("research"))
    demo_trainer.run_fn(_fn_args(trained, research, steps=40))
    spec = torch_model.read_spec(research)
    out = str(tmp_path_factory.mktemp("imported"))
    config = ImporterConfig(
        source_kind="state_dict", source_path=os.path.join(research, torch_model.WEIGHTS_FILE),
        module_class=spec.module_class, module_kwargs=spec.module_kwargs, inputs=spec.inputs,
        output_names=spec.outputs)
    result = convert.import_model(
        config, out, examples_dir=trained["raw"], transform_dir=trained["graph"],
        transformed_examples_dir=trained["transformed"])
    return {"result": result, "research": research, "spec": spec, "out": out}


def test_handover_with_transform_graph_serves_raw_features_and_passes_skew_check(
        handed_over):
    report = handed_over["result"].report
    assert handed_over["result"].blessed, check_table(
        [c for c in report["checks"] if not c["ok"]])
    skew = report["transform"]["skew_check"]
    assert skew["paired"] == 32 and skew["without_counterpart"] == 0
    chain = [c for c in report["checks"] if "materialised" in c["reference"]]
    assert {c["batch"] for c in chain} == {1, 7, 32}
    assert {c["reference"].split(" vs ")[1] for c in chain} == {
        "serving_tf_example on raw tf.Examples", "serving_default on raw features"}
    assert all(c["mismatches"] == 0 for c in chain if c["output"] == "experts")
    loaded = tf.saved_model.load(handed_over["result"].serving_dir)
    inputs = loaded.signatures["serving_default"].structured_input_signature[1]
    assert inputs["country"].dtype == tf.string
    assert "clicked" not in inputs and "user_id" not in inputs
    assets = os.listdir(os.path.join(handed_over["result"].serving_dir, "assets"))
    assert demo_preprocessing.COUNTRY_VOCABULARY in assets


def test_handover_unseen_country_served_as_transform_oov_bucket(trained, handed_over):
    from tfx_bridge.pipelines.demo_models import CtrTransformed

    record = read_records(trained["raw"], 1, split="eval")[0]
    example = tf.train.Example.FromString(record)
    example.features.feature["country"].bytes_list.value[:] = [b"zz"]
    output = tft.TFTransformOutput(trained["graph"])
    transformed = output.transform_features_layer()(
        tf.io.parse_example([example.SerializeToString()], output.raw_feature_spec()))
    vocab = output.vocabulary_size_by_name(demo_preprocessing.COUNTRY_VOCABULARY)
    assert int(transformed["country_id"][0]) == vocab  # Transform's OOV bucket

    spec = handed_over["spec"]
    module = CtrTransformed(**spec.module_kwargs)
    module.load_state_dict(torch_model.load_state_dict(handed_over["research"]))
    module.eval()
    with torch.no_grad():
        want = module(*(torch.from_numpy(transformed[n].numpy())
                        for n in demo_preprocessing.MODEL_FEATURES))
    loaded = tf.saved_model.load(handed_over["result"].serving_dir)
    got = loaded.signatures["serving_tf_example"](
        examples=tf.constant([example.SerializeToString()]))
    np.testing.assert_allclose(got["score"].numpy(), want[0].numpy(), atol=1e-5)
    np.testing.assert_array_equal(got["experts"].numpy(), want[1].numpy())


def test_transform_renamed_feature_refused_naming_both_sides(trained, handed_over, tmp_path):
    spec = handed_over["spec"]
    renamed = [s.replace("price_z:", "price_norm:") for s in spec.inputs]
    with pytest.raises(ImporterConfigError,
                       match=r"model input 'price_norm' is not a transformed feature.*"
                             r"Transform writes \[.*'price_z'.*\]"):
        convert.import_model(
            ImporterConfig(source_kind="state_dict",
                           source_path=os.path.join(handed_over["research"],
                                                    torch_model.WEIGHTS_FILE),
                           module_class=spec.module_class, module_kwargs=spec.module_kwargs,
                           inputs=renamed, output_names=spec.outputs),
            str(tmp_path / "out"), transform_dir=trained["graph"])
    assert not os.path.exists(tmp_path / "out" / convert.SERVING_DIR)


def test_handover_stock_torch_linear_on_vector_feature_serves_only_its_raw_inputs(
        trained, tmp_path, raw_feeds):
    """A model this library did not write (torch.nn.Linear) on a [batch, 2] transformed
    feature: imported behind the Transform graph, skew-checked, and its serving
    signature asks only for the raw features that feature is computed from."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(2, 1)
    weights = str(tmp_path / "linear.pt")
    torch.save(linear.state_dict(), weights)
    config = ImporterConfig(source_kind="state_dict", source_path=weights,
                            module_class="torch.nn:Linear",
                            module_kwargs={"in_features": 2, "out_features": 1},
                            inputs=[f"{VECTOR_FEATURE}:float32:-1,2"], output_names=["y"])
    result = convert.import_model(
        config, str(tmp_path / "out"), examples_dir=trained["raw"],
        transform_dir=trained["graph"], transformed_examples_dir=trained["transformed"])
    report = result.report
    assert result.blessed, check_table([c for c in report["checks"] if not c["ok"]])
    assert report["transform"]["skew_check"]["paired"] == 32
    assert sorted(r.split(":")[0] for r in report["transform"]["raw_inputs"]) == [
        "price", "user_ctr"]
    signature = tf.saved_model.load(result.serving_dir).signatures["serving_default"]
    assert set(signature.structured_input_signature[1]) == {"price", "user_ctr"}
    # By hand on a raw eval record: Transform's layer, then the Linear's own weights.
    record = read_records(trained["raw"], 1, split="eval")[0]
    output = tft.TFTransformOutput(trained["graph"])
    vector = output.transform_features_layer()(
        tf.io.parse_example([record], output.raw_feature_spec()))[VECTOR_FEATURE]
    with torch.no_grad():
        want = linear(torch.from_numpy(vector.numpy())).numpy()
    np.testing.assert_allclose(signature(**raw_feeds(signature, record))["y"].numpy(), want,
                               atol=1e-5)
