"""Local runs (LocalDagRunner + Beam DirectRunner, MLMD in SQLite) and their results."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from tfx import v1 as tfx
from tfx.orchestration import metadata as tfx_metadata
from tfx.types import artifact_utils

from tfx_bridge import limits, schemas
from tfx_bridge.artifacts import layout, properties
from tfx_bridge.artifacts.examples import read_records
from tfx_bridge.components.parquet_example_gen import parquet_to_examples as core
from tfx_bridge.components.parquet_example_gen import plan as ingest_plan
from tfx_bridge.components.parquet_example_gen import spec as peg_spec
from tfx_bridge.errors import BridgeError
from tfx_bridge.pipelines import demo_data, run_state, spans
from tfx_bridge.pipelines import pipeline as pipelines
from tfx_bridge.pipelines.config import PipelineConfig
from tfx_bridge.storage import fs

DEMO_PIPELINE_NAME = "tfx-bridge-demo"
METADATA_FILE = "metadata.sqlite"
PIPELINE_ROOT_DIR = "pipeline_root"


def run_local(pipeline) -> None:
    """Runs a TFX pipeline with LocalDagRunner (components in topological order)."""
    tfx.orchestration.LocalDagRunner().run(pipeline)


def latest_artifacts(metadata_path: str, type_name: str) -> List[Any]:
    """Artifacts of a type in an MLMD SQLite store, newest first."""
    config = tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata_path)
    with tfx_metadata.Metadata(config) as m:
        found = m.store.get_artifacts_by_type(type_name)
    return sorted(found, key=lambda a: a.id, reverse=True)


def _custom(artifact, key: str) -> Optional[Any]:
    if key not in artifact.custom_properties:
        return None
    value = artifact.custom_properties[key]
    return value.string_value if value.HasField("string_value") else value.int_value


def run_data_demo(workdir: str, data_root: str,
                  beam_pipeline_args: Optional[List[str]] = None,
                  contract_path: Optional[str] = None) -> Dict[str, Any]:
    """Runs the data pipeline on ``data_root`` and summarises the latest outputs.

    The consumer contract defaults to the demo model's (schemas/demo.contract.yaml).
    """
    metadata_path = os.path.join(workdir, METADATA_FILE)
    pipeline = pipelines.create_data_pipeline(
        DEMO_PIPELINE_NAME, os.path.join(workdir, PIPELINE_ROOT_DIR), data_root,
        metadata_path=metadata_path, beam_pipeline_args=beam_pipeline_args,
        contract_path=contract_path or schemas.path(schemas.DEMO_CONTRACT))
    run_local(pipeline)
    examples = latest_artifacts(metadata_path, "Examples")[0]
    schema = latest_artifacts(metadata_path, "Schema")[0]
    anomalies = latest_artifacts(metadata_path, "ExampleAnomalies")[0]
    split_names = artifact_utils.decode_split_names(
        examples.properties["split_names"].string_value)
    source = limits.read_json(fs.join(examples.uri, layout.SOURCE_SCHEMA_FILE), RunInputError,
                              "Run the data pipeline again on a fresh workdir.")
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.utils import io_utils
    schema_proto = io_utils.parse_pbtxt_file(os.path.join(schema.uri, "schema.pbtxt"),
                                             schema_pb2.Schema())
    return {
        "examples_uri": examples.uri,
        "span": _custom(examples, "span"),
        "num_rows": _custom(examples, peg_spec.NUM_ROWS_PROPERTY),
        "splits": {name: core.count_records(core.split_dir(examples.uri, name))
                   for name in split_names},
        "columns": source["columns"],
        "schema_uri": schema.uri,
        "schema_features": len(schema_proto.feature),
        "metadata": metadata_path,
        "anomalies_uri": anomalies.uri,
        "schema_guard_blessed": _custom(anomalies, "blessed"),
        "schema_guard_findings": _custom(anomalies, "findings"),
    }


SERVING_DIR = "serving"
RESEARCH_DIR = "research"
FULL_PIPELINE_NAME = "tfx-bridge"


class RunInputError(BridgeError):
    """The folders given to a pipeline run cannot work; says which and how."""


def check_run_inputs(data_root: str, model_source: Optional[str],
                     model_file: str = PipelineConfig.defaults().model_file
                     ) -> Tuple[Optional[str], Optional[str]]:
    """Refuses, before the pipeline starts, folders it would fail on minutes later.

    Returns the model folder to import and a note when it was picked: a
    research root holding ``span-N/<model_file>`` folders means its newest span.
    """
    import re

    if not fs.isdir(data_root):
        raise RunInputError(f"--data-root {data_root} does not exist.")
    found = spans.spans(data_root, demo_data.SPAN_PATTERN)  # TFX's rule, refusals named
    folders = re.compile(r"^span-(\d+)/?$")
    named = [int(m.group(1)) for m in map(folders.fullmatch, fs.listdir(data_root)) if m]
    if not found and not named:
        raise RunInputError(
            f"--data-root {data_root} holds no span folders: the pipeline reads "
            f"{demo_data.SPAN_PATTERN!r} under it (e.g. {data_root}/span-1/part-0.parquet).")
    newest = max(found) if found else None
    if named and (newest is None or max(named) > newest):
        folder = fs.join(data_root, f"span-{max(named)}")
        pattern = demo_data.SPAN_PATTERN.split("/", 1)[1]
        raise RunInputError(
            f"The newest span folder {folder} holds no file matching {pattern!r} (the "
            f"pipeline reads {demo_data.SPAN_PATTERN!r}): ExampleGen would silently take an "
            "older span, or none. Add its Parquet files, or remove the folder.")
    _check_rows(fs.join(data_root, found[newest].folder))
    if model_source is None:  # trained in the pipeline
        return None, None
    if not fs.isdir(model_source):
        raise RunInputError(f"--model-source {model_source} does not exist.")
    if fs.isfile(fs.join(model_source, model_file)):
        return model_source, None
    research = spans.spans(model_source, f"span-{spans.SPAN_SPEC}/{model_file}")
    if research:
        chosen = fs.join(model_source, research[max(research)].folder)
        return chosen, f"model source: the newest span folder, {chosen}"
    raise RunInputError(
        f"--model-source {model_source} holds no {model_file}: give the research team's "
        f"output folder (with {model_file}), or a root of span-N/{model_file} folders (the "
        "newest is taken).")


def _check_rows(folder: str) -> None:
    """The span the pipeline will take must hold rows: a span of 0 rows would pass
    every check and end in an unrelated training error."""
    pattern = demo_data.SPAN_PATTERN.split("/", 1)[1]
    plan = ingest_plan.plan_ingest(folder, ingest_plan.SplitConfig.parse("all:1", pattern))
    if plan.num_rows == 0:
        raise RunInputError(
            f"The newest span {folder} holds 0 rows in {len(plan.files)} file(s): nothing "
            "to check, train or push. Write its rows, or remove the folder.")


def run_full(workdir: str, data_root: str, model_source: Optional[str],
             serving_base_path: str, config: Optional[PipelineConfig] = None,
             beam_pipeline_args: Optional[List[str]] = None,
             pipeline_root: Optional[str] = None, transform_source: Optional[str] = None,
             beam_runner=None) -> Dict[str, Any]:
    """Runs the whole pipeline once (the newest span) and summarises what it did.

    ``pipeline_root`` (default ``<workdir>/pipeline_root``), ``data_root``,
    ``model_source`` and ``serving_base_path`` may be ``s3://`` or ``gs://``
    (for s3 the caller enables tensorflow-io for the stock components and passes
    Beam its options: :func:`tfx_bridge.beam.object_store_args`);
    MLMD stays in a SQLite file in ``workdir``. ``config`` is the run's
    :class:`PipelineConfig` (default: its defaults), given to
    :func:`tfx_bridge.pipelines.pipeline.create_pipeline` with
    ``transform_source`` and ``beam_runner``. ``model_source=None`` trains in the
    pipeline: Transform and PyTorchTrainer with the demo's modules unless the
    config names its own.

    The summary holds the pushed version and its path (or why nothing was
    pushed), SchemaGuard's result, the conversion error, the optimizer's
    backend and latency, and one prediction made by the pushed SavedModel.
    """
    from tfx_bridge.components.serving_pusher import state

    metadata_path = os.path.join(workdir, METADATA_FILE)
    config = pipelines.with_demo_modules(config or PipelineConfig(), model_source)
    model_name = config.model_name
    before = set(state.versions(fs.join(serving_base_path, model_name)))
    since = run_state.latest_execution_id(metadata_path)
    pipeline = pipelines.create_pipeline(
        FULL_PIPELINE_NAME, pipeline_root or os.path.join(workdir, PIPELINE_ROOT_DIR),
        data_root, model_source, serving_base_path, config, metadata_path=metadata_path,
        schema_path=schemas.path(schemas.DEMO_SCHEMA),
        contract_path=schemas.path(schemas.DEMO_CONTRACT),
        beam_pipeline_args=beam_pipeline_args, transform_source=transform_source,
        beam_runner=beam_runner)
    run_local(pipeline)
    return summarize(metadata_path, serving_base_path, model_name, before, since)


def summarize(metadata_path: str, serving_base_path: str, model_name: str,
              versions_before: set, since_execution_id: int = 0) -> Dict[str, Any]:
    """What this run did: read from the outputs of its own executions (those after
    ``since_execution_id``), not the newest of each type in MLMD, which after a
    refused span may be an earlier run's."""
    produced = run_state.outputs_since(metadata_path, since_execution_id)

    def latest(type_name: str, uri_part: str):
        # Transform writes Examples and ExampleAnomalies too: pick the components' own.
        found = [a for a in produced.get(type_name, []) if uri_part in a.uri]
        return found[0] if found else None

    examples = latest("Examples", "/ParquetExampleGen/")
    anomalies = latest("ExampleAnomalies", "/SchemaGuard/")
    trained = latest("Model", "/PyTorchTrainer/")
    imported = latest("Model", "PyTorchModelImporter")
    optimized = latest("Model", "TrtOptimizer")
    pushed = latest("PushedModel", "/ServingPusher/")
    out = {
        "span": _custom(examples, "span"),
        "schema_guard": {"blessed": _custom(anomalies, "blessed"),
                         "findings": _custom(anomalies, "findings")},
        "training": None if trained is None else {
            "retrained": _custom(trained, "retrained"),
            "warm_started_from": _custom(trained, "warm_started_from"),
            "eval_auc": properties.get_float(trained, "eval_auc"),
            "eval_loss": properties.get_float(trained, "eval_loss")},
        "conversion": {"blessed": _custom(imported, "blessed"),
                       "max_abs_error": properties.get_float(imported, "max_abs_error")},
        "optimizer": {"backend": _custom(optimized, "backend"),
                      "latency_p50_ms_before":
                          properties.get_float(optimized, "latency_p50_ms_before"),
                      "latency_p50_ms_after":
                          properties.get_float(optimized, "latency_p50_ms_after"),
                      "serving_flags": _custom(optimized, "serving_flags"),
                      "decision": _custom(optimized, "decision")},
        "pushed": bool(_custom(pushed, "pushed")),
        "new_push": False,
        "push_reason": _custom(pushed, "push_reason"),
        "pushed_version": None,
        "pushed_path": None,
        "prediction_input": None,
        "prediction": None,
    }
    evaluation = latest("ModelEvaluation", "/Evaluator/")
    if not out["pushed"] and evaluation is not None and "Evaluator" in (out["push_reason"] or ""):
        why = evaluator_reason(evaluation.uri)
        if why:
            out["push_reason"] = f"{out['push_reason']} (Evaluator: {why})"
    if out["pushed"]:
        out["pushed_version"] = int(_custom(pushed, "pushed_version"))
        destination = _custom(pushed, "pushed_destination")
        out["pushed_path"] = destination if fs.is_remote(destination) else \
            os.path.abspath(destination)
        out["prediction_input"], out["prediction"] = predict_one(out["pushed_path"],
                                                                 examples.uri)
    from tfx_bridge.components.serving_pusher import state
    out["served_versions"] = state.versions(fs.join(serving_base_path, model_name))
    out["new_push"] = bool(set(out["served_versions"]) - versions_before)
    return out


def evaluator_reason(evaluation_uri: str) -> Optional[str]:
    """Why the Evaluator did not bless: its failed metric thresholds, as TFMA wrote them,
    or said from the threshold and value where TFMA left no message. An AUC over an
    eval split of one label class (TFMA writes it as 0.0) is said as undefined, from
    the split's mean label. None when it recorded no failure."""
    import tensorflow_model_analysis as tfma

    try:
        result = tfma.load_validation_result(evaluation_uri)
    except Exception:  # no validations file: nothing more to say than "not blessed"
        return None
    reasons = []
    for per_slice in result.metric_validations_per_slice:
        for failure in per_slice.failures:
            name = failure.metric_key.name
            one_class = _one_label_class(evaluation_uri) if name == "auc" else None
            if one_class is not None:
                reasons.append(f"AUC undefined: every eval label is {one_class}")
            else:
                reasons.append(failure.message or _failed_threshold(failure))
    return "; ".join(dict.fromkeys(reasons)) or None


def _one_label_class(evaluation_uri: str) -> Optional[int]:
    """0 or 1 when the candidate's eval split holds that label only (its mean label)."""
    import tensorflow_model_analysis as tfma

    try:
        for per_slice in tfma.load_metrics(evaluation_uri):
            for kv in per_slice.metric_keys_and_values:
                key = kv.key
                if key.name == "mean_label" and not key.is_diff and \
                        key.model_name in ("", "candidate"):
                    mean = kv.value.double_value.value
                    return int(mean) if mean in (0.0, 1.0) else None
    except Exception:  # noqa: BLE001  (no metrics file: say the threshold instead)
        return None
    return None


def _failed_threshold(failure) -> str:
    """``auc 0.48 is below the lower bound 0.5`` from a failure without a message."""
    name = failure.metric_key.name
    value = failure.metric_value.double_value.value
    shown = f"{name} {value:.4g}" + (" (against the baseline)"
                                     if failure.metric_key.is_diff else "")
    threshold = failure.metric_threshold
    if threshold.HasField("value_threshold"):
        bounds = threshold.value_threshold
        if bounds.HasField("lower_bound") and value < bounds.lower_bound.value:
            return f"{shown} is below the lower bound {bounds.lower_bound.value:.4g}"
        if bounds.HasField("upper_bound") and value > bounds.upper_bound.value:
            return f"{shown} is above the upper bound {bounds.upper_bound.value:.4g}"
    if threshold.HasField("change_threshold"):
        return f"{shown} changed more than allowed against the latest blessed model"
    return f"{shown} failed its threshold"


def predict_one(saved_model_dir: str, examples_uri: str
                ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """One raw record of the eval split through the pushed model's tf.Example
    signature: (the record's features the model's serving_default takes, the outputs)."""
    import tensorflow as tf

    record = read_records(examples_uri, 1, split="eval")[0]
    features = tf.train.Example.FromString(record).features.feature
    with fs.local_copy(saved_model_dir, prefix="tfx-bridge-predict-") as local:
        model = tf.saved_model.load(local)
        result = model.signatures["serving_tf_example"](examples=tf.reshape(record, [1]))
        taken = model.signatures["serving_default"].structured_input_signature[1]
        shown = {}
        for name in sorted(taken):
            f = features[name]
            values = list(getattr(f, f.WhichOneof("kind")).value) if f.WhichOneof("kind") \
                else []
            values = [v.decode() if isinstance(v, bytes) else v for v in values]
            shown[name] = values[0] if len(values) == 1 else values
        return shown, {k: v.numpy().tolist()[0] for k, v in sorted(result.items())}
