"""Pipeline definitions.

``create_data_pipeline`` is ParquetExampleGen -> StatisticsGen -> SchemaGen (or
ImportSchemaGen over schemas/) -> SchemaGuard, the data half of the full
tfx-bridge pipeline.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from tfx import v1 as tfx
from tfx.orchestration import pipeline as tfx_pipeline

from tfx_bridge.components.parquet_example_gen import ParquetExampleGen
from tfx_bridge.components.schema_guard import SchemaGuard
from tfx_bridge.pipelines import demo_data
from tfx_bridge.pipelines.config import PipelineConfig, PipelineConfigError
from tfx_bridge.pipelines.inputs import absolute, content_importer, pinned_file


def span_input_config(pattern: str = demo_data.SPAN_PATTERN) -> tfx.proto.Input:
    """One input split over span folders; the driver picks the latest span."""
    return tfx.proto.Input(splits=[tfx.proto.Input.Split(name="all", pattern=pattern)])


def create_data_pipeline(
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    metadata_path: Optional[str] = None,
    pattern: str = demo_data.SPAN_PATTERN,
    columns: Optional[Sequence[str]] = None,
    schema_path: Optional[str] = None,
    contract_path: Optional[str] = None,
    fail_on_anomalies: bool = True,
    beam_pipeline_args: Optional[List[str]] = None,
    enable_cache: bool = True,
    preprocessing_module: Optional[str] = None,
    content_identity: bool = True,
) -> tfx_pipeline.Pipeline:
    """ParquetExampleGen -> StatisticsGen -> SchemaGen / ImportSchemaGen -> SchemaGuard
    (-> Transform, with ``preprocessing_module``).

    Args:
      metadata_path: SQLite MLMD file for local runs; None when the
        orchestrator supplies metadata (Kubeflow).
      schema_path: a curated schema (e.g. ``schemas.path(schemas.DEMO_SCHEMA)``)
        for ImportSchemaGen; None infers one with SchemaGen from the span.
      contract_path: the consumer contract for SchemaGuard (e.g.
        ``schemas.path(schemas.DEMO_CONTRACT)``); None checks the schema only.
      preprocessing_module: the ``preprocessing_fn`` for stock Transform, as a
        dotted path to the function in an installed package (e.g.
        ``"tfx_bridge.pipelines.demo_preprocessing.preprocessing_fn"``) or a
        module file defining ``preprocessing_fn``; None leaves Transform out.
      content_identity: the schema and contract files are read by content
        (:mod:`tfx_bridge.pipelines.inputs`); False for a spec compiled once
        and run many times (Kubeflow).
    """
    pipeline_root, metadata_path = absolute(pipeline_root), absolute(metadata_path)
    schema_path, contract_path = _read_by_content(pipeline_root, content_identity,
                                                  schema_path, contract_path)
    data = list(data_components(data_root, pattern, columns, schema_path, contract_path,
                                fail_on_anomalies))
    if preprocessing_module:
        data.append(transform_component(data[0], data[2], data[3], preprocessing_module))
    return _pipeline(pipeline_name, pipeline_root, data, metadata_path,
                     beam_pipeline_args, enable_cache)


def transform_component(example_gen, schema_gen, schema_guard, preprocessing_module: str,
                        statistics: bool = False):
    """Stock Transform on ParquetExampleGen's Examples and the schema, after SchemaGuard
    passed the data: its analyzers (vocabularies, means) are computed once by Beam,
    its materialised examples feed PyTorch training, its graph goes to serving.

    ``statistics`` turns on Transform's own pre- and post-transform TFDV
    statistics and anomalies: two more passes over the data (about a third of
    Transform's time on the demo spans); off by default, since StatisticsGen and
    SchemaGuard already check the raw data."""
    transform = tfx.components.Transform(examples=example_gen.outputs["examples"],
                                         schema=schema_gen.outputs["schema"],
                                         disable_statistics=not statistics,
                                         **_where(preprocessing_module, "preprocessing_fn"))
    transform.add_upstream_node(schema_guard)
    return transform


def data_components(data_root: str, pattern: str = demo_data.SPAN_PATTERN,
                    columns: Optional[Sequence[str]] = None, schema_path: Optional[str] = None,
                    contract_path: Optional[str] = None, fail_on_anomalies: bool = True):
    """ParquetExampleGen, StatisticsGen, SchemaGen or ImportSchemaGen, SchemaGuard."""
    example_gen = ParquetExampleGen(input_base=absolute(data_root),
                                    input_config=span_input_config(pattern),
                                    columns=columns)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    if schema_path is None:
        schema_gen = tfx.components.SchemaGen(statistics=statistics_gen.outputs["statistics"],
                                              infer_feature_shape=False)
    else:
        schema_gen = tfx.components.ImportSchemaGen(schema_file=schema_path)
    schema_guard = SchemaGuard(examples=example_gen.outputs["examples"],
                               schema=schema_gen.outputs["schema"],
                               contract_path=contract_path,
                               fail_on_anomalies=fail_on_anomalies)
    return example_gen, statistics_gen, schema_gen, schema_guard


def _read_by_content(pipeline_root: str, content_identity: bool, *paths: Optional[str]
                     ) -> List[Optional[str]]:
    """Files components read by path: pinned by content under the pipeline root, or
    (``content_identity=False``) absolute paths as given."""
    if not content_identity:
        return [absolute(p) for p in paths]
    return [None if p is None else pinned_file(p, pipeline_root) for p in paths]


def _pipeline(name: str, root: str, components: list, metadata_path: Optional[str],
              beam_pipeline_args: Optional[List[str]], enable_cache: bool
              ) -> tfx_pipeline.Pipeline:
    metadata = (tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata_path)
                if metadata_path else None)
    return tfx.dsl.Pipeline(pipeline_name=name, pipeline_root=root, components=components,
                            metadata_connection_config=metadata,
                            beam_pipeline_args=beam_pipeline_args or [],
                            enable_cache=enable_cache)


def eval_config(auc_floor: float = PipelineConfig.defaults().auc_floor):
    """AUC on the tf.Example signature; a candidate must beat the floor and must not
    do worse than the latest blessed model (the baseline) by more than 1e-3."""
    import tensorflow_model_analysis as tfma

    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_tf_example",
                                    label_key=demo_data.LABEL, prediction_key="score")],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            tfma.MetricConfig(class_name="ExampleCount"),
            # 0 or 1 names an eval split of one label class, where AUC is undefined.
            tfma.MetricConfig(class_name="MeanLabel"),
            tfma.MetricConfig(
                class_name="AUC",
                threshold=tfma.MetricThreshold(
                    value_threshold=tfma.GenericValueThreshold(lower_bound={"value": auc_floor}),
                    change_threshold=tfma.GenericChangeThreshold(
                        direction=tfma.MetricDirection.HIGHER_IS_BETTER,
                        absolute={"value": -1e-3})))])])


DEMO_PREPROCESSING = "tfx_bridge.pipelines.demo_preprocessing.preprocessing_fn"
DEMO_TRAINER = "tfx_bridge.pipelines.demo_trainer.run_fn"


def with_demo_modules(config: PipelineConfig, model_source: Optional[str]) -> PipelineConfig:
    """Training in the pipeline (no ``model_source``) runs the demo's preprocessing_fn
    and run_fn where ``config`` names none; hand-over mode takes ``config`` as given."""
    if model_source is not None:
        return config
    return config.updated(preprocessing_module=config.preprocessing_module or DEMO_PREPROCESSING,
                          trainer_module=config.trainer_module or DEMO_TRAINER)


def _where(module: str, key: str) -> dict:
    """A module file (``.py``, packaged by TFX for the tasks) or a dotted function path."""
    return {"module_file": module} if module.endswith(".py") else {key: module}


def create_pipeline(
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    model_source: Optional[str],
    serving_base_path: str,
    config: Optional[PipelineConfig] = None,
    metadata_path: Optional[str] = None,
    pattern: str = demo_data.SPAN_PATTERN,
    schema_path: Optional[str] = None,
    contract_path: Optional[str] = None,
    beam_pipeline_args: Optional[List[str]] = None,
    transform_source: Optional[str] = None,
    beam_runner=None,
    content_identity: bool = True,
    **settings,
) -> tfx_pipeline.Pipeline:
    """The whole bridge: Parquet spans in, a TF Serving push out, in one of two modes.

    **Train in the pipeline** (``trainer_module``, ``model_source=None``):
    ParquetExampleGen (newest span) -> StatisticsGen -> SchemaGen (or
    ImportSchemaGen over ``schema_path``) -> SchemaGuard -> Transform
    (``preprocessing_module``) -> PyTorchTrainer (``trainer_module``'s
    ``run_fn``, warm-started from the latest blessed model) ->
    PyTorchModelImporter (spec from the trainer, Transform graph served, skew
    check) -> TrtOptimizer -> Evaluator (baseline: the latest blessed model;
    AUC must not drop) -> ServingPusher.

    **Hand over weights** (``model_source``, the research team's folder): the
    same chain with an Importer of that folder in place of the trainer;
    ``module_class``/``inputs``/``output_names`` declare the model. With
    ``preprocessing_module`` the weights were trained on a Transform
    artifact's output: give that TransformGraph's folder as
    ``transform_source`` (the graph the team trained on is the one served);
    without it the pipeline's own Transform graph is served.

    The run's settings are ``config``, a :class:`PipelineConfig` (default: its
    defaults), with any of its fields given as keyword ``settings`` replacing
    them (``create_pipeline(..., train_steps=30)``). ``transform_statistics``
    adds Transform's pre/post-transform statistics (see
    :func:`transform_component`). ``preprocessing_module`` / ``trainer_module``:
    a dotted path to ``preprocessing_fn`` / ``run_fn`` in an installed package,
    or a module file (``.py``, which TFX packages for the tasks). Every gate's
    blessing goes to the pusher. Only resolver strategies KubeflowV2DagRunner
    compiles are used (LatestBlessedModelStrategy), and no InfraValidator.
    ``optimizer_candidates`` chooses TrtOptimizer's CPU candidates (default:
    those stock TF Serving serves without experimental flags). ``beam_runner``, a
    :class:`tfx_bridge.beam_runners.BeamSettings`, is checked now (a preset that
    cannot work raises before anything is built) and its options go before
    ``beam_pipeline_args``; a portable runner here needs its endpoints (the
    CLI's ``run`` starts local ones). ``content_identity``: the hand-over folders,
    schema and contract are read by content (:mod:`tfx_bridge.pipelines.inputs`: a
    changed file under the same path is a new input, never a cached one); False
    for a spec compiled once and run many times (Kubeflow). Local paths are made
    absolute either way.
    """
    from tfx_bridge import beam_runners
    from tfx_bridge.components.pytorch_model_importer import PyTorchModelImporter
    from tfx_bridge.components.serving_pusher import ServingPusher
    from tfx_bridge.components.trt_optimizer import TrtOptimizer

    if config is not None and not isinstance(config, PipelineConfig):
        raise PipelineConfigError(
            f"create_pipeline's sixth argument is a PipelineConfig, not {config!r}: pass "
            "run settings by name (model_name=..., train_steps=...) or in the config.")
    config = (config or PipelineConfig()).updated(**settings)
    preprocessing_module, trainer_module = config.preprocessing_module, config.trainer_module
    runner_args = (beam_runners.pipeline_args(beam_runners.check(beam_runner))
                   if beam_runner is not None else [])

    if (model_source is None) == (trainer_module is None):
        raise ValueError("Give trainer_module (train in the pipeline) or model_source "
                         "(hand over weights), not both or neither.")
    if trainer_module and not preprocessing_module:
        raise ValueError("trainer_module trains on Transform's output: give "
                         "preprocessing_module too.")
    if transform_source and not model_source:
        raise ValueError("transform_source is for hand-over mode (with model_source).")
    pipeline_root, metadata_path = absolute(pipeline_root), absolute(metadata_path)
    serving_base_path = absolute(serving_base_path)
    schema_path, contract_path = _read_by_content(pipeline_root, content_identity,
                                                  schema_path, contract_path)
    example_gen, statistics_gen, schema_gen, schema_guard = data_components(
        data_root, pattern, schema_path=schema_path, contract_path=contract_path)
    components = [example_gen, statistics_gen, schema_gen, schema_guard]
    baseline = None
    if config.evaluate:
        baseline = tfx.dsl.Resolver(
            strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
            model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
            model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
        ).with_id("latest_blessed_model")
        components.append(baseline)
    transform = None
    if preprocessing_module:
        transform = transform_component(example_gen, schema_gen, schema_guard,
                                        preprocessing_module, config.transform_statistics)
        components.append(transform)
    graph = transform.outputs["transform_graph"] if transform else None
    if transform_source:
        handed = content_importer(transform_source,
                                  tfx.types.standard_artifacts.TransformGraph,
                                  "research_transform_graph", content_identity)
        components.append(handed)
        graph = handed.outputs["result"]
    transformed = transform.outputs["transformed_examples"] if transform else None
    if trainer_module:
        from tfx_bridge.components.pytorch_trainer import PyTorchTrainer

        trainer = PyTorchTrainer(
            examples=transformed, transform_graph=graph,
            schema=schema_gen.outputs["schema"],
            base_model=baseline.outputs["model"] if baseline else None,
            train_args=tfx.proto.TrainArgs(num_steps=config.train_steps),
            eval_args=tfx.proto.EvalArgs(num_steps=None),
            custom_config=config.custom_config, **_where(trainer_module, "run_fn"))
        components.append(trainer)
        importer = PyTorchModelImporter(
            source_model=trainer.outputs["model"], transform_graph=graph,
            examples=example_gen.outputs["examples"], transformed_examples=transformed)
    else:
        research = content_importer(model_source, tfx.types.standard_artifacts.Model,
                                    "research_model", content_identity)
        components.append(research)
        importer = PyTorchModelImporter(
            source_kind="state_dict", source_model=research.outputs["result"],
            source_path=config.model_file, module_class=config.module_class,
            inputs=list(config.inputs) or demo_data.CTR_INPUTS,
            output_names=list(config.output_names) or demo_data.CTR_OUTPUTS,
            schema=None if graph else schema_gen.outputs["schema"],
            examples=example_gen.outputs["examples"], transform_graph=graph,
            transformed_examples=transformed if graph and not transform_source else None)
    # Nothing model-side runs on data SchemaGuard has not passed.
    importer.add_upstream_node(schema_guard)
    optimizer = TrtOptimizer(model=importer.outputs["model"],
                             examples=example_gen.outputs["examples"],
                             iterations=config.optimizer_iterations,
                             candidates=config.optimizer_candidates)
    components += [importer, optimizer]
    blessing = None
    if config.evaluate:
        evaluator = tfx.components.Evaluator(
            examples=example_gen.outputs["examples"],
            model=optimizer.outputs["optimized_model"],
            baseline_model=baseline.outputs["model"],
            eval_config=eval_config(config.auc_floor))
        components.append(evaluator)
        blessing = evaluator.outputs["blessing"]
    pusher = ServingPusher(model=optimizer.outputs["optimized_model"],
                           imported_model=importer.outputs["model"],
                           schema_guard=schema_guard.outputs["anomalies"],
                           model_blessing=blessing,
                           examples=example_gen.outputs["examples"],
                           base_path=serving_base_path, model_name=config.model_name)
    components.append(pusher)
    if runner_args:
        beam_pipeline_args = runner_args + list(beam_pipeline_args or [])
    return _pipeline(pipeline_name, pipeline_root, components, metadata_path,
                     beam_pipeline_args, config.enable_cache)
