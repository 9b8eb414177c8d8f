"""The Transform graph and the converted model served as one SavedModel, and the
training/serving skew check across the chain. No TFX imports.

With a TFX Transform graph (``transform_fn/`` + ``transformed_metadata/``):

- ``serving_tf_example``: a serialized raw tf.Example (no label needed) ->
  ``tf.io.parse_example`` with the raw features the model depends on -> the
  Transform layer -> the model's inputs, picked by transformed-feature name
  and cast to the declared dtypes -> the converted model.
- ``serving_default``: the same raw features by name with their raw dtypes
  (strings stay strings: the vocabulary lookup happens in the graph), dense
  ``[batch]`` (or ``[batch, k]``) tensors; a list of varying length is a
  ``[batch, n]`` tensor padded with ``PADDING`` (-1 for ints, NaN for floats,
  ``""`` for strings), which are not values.
- The Transform layer is tracked on the exported module (its lookup tables
  are initialised on load) and its vocabulary files are copied to
  ``assets/``: the version is self-contained.

Which raw features a model needs is measured, not guessed: TFT prunes a
transform to the inputs it is fed, so a raw feature is needed exactly when
leaving it out drops one of the model's inputs (the label drops out this way).

The skew check (:func:`verify_chain`) pairs raw eval records with the records
Transform materialised for the same split, by content (the transformed values
the graph computes for a raw record must equal a materialised record's), then
compares PyTorch on the materialised features with the SavedModel on the raw
serialized records and on the raw features, at each batch size.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

import numpy as np

from tfx_bridge.artifacts import compare, examples
from tfx_bridge.artifacts.savedmodel import EXAMPLE_SIGNATURE, SERVING_SIGNATURE
from tfx_bridge.artifacts.tensorspec import TensorSpec
from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError
from tfx_bridge.errors import short_message

EXAMPLE_INPUT = "examples"
# Padding of a variable-length raw feature in serving_default: not a value.
PADDING = {"int64": -1, "float32": float("nan"), "string": b""}


def _tft():
    try:
        import tensorflow_transform as tft
    except ImportError as e:  # pragma: no cover - a base dependency of tfx-bridge
        raise ImporterConfigError(f"tensorflow-transform is not installed ({e}).") from e
    return tft


@dataclasses.dataclass
class RawInput:
    """A raw feature ``serving_default`` takes: dense ``[batch] + shape``."""

    name: str
    dtype: str  # "string", "int64" or "float32" (the tf.Example wire types)
    shape: Tuple[int, ...]  # per example; (-1,) for a list of varying length
    sparse: bool  # TFT reads it as a VarLenFeature: fed as a SparseTensor

    @property
    def ragged(self) -> bool:
        return self.shape == (-1,)

    def parse_spec(self):
        """How a raw tf.Example holds it, as the dense tensor serving_default takes."""
        import tensorflow as tf

        dtype = tf.as_dtype(self.dtype)
        if self.ragged:
            return tf.io.VarLenFeature(dtype)
        return tf.io.FixedLenFeature(self.shape, dtype)

    def to_text(self) -> str:
        return f"{self.name}:{self.dtype}:" + ",".join(str(d) for d in (-1, *self.shape))


def transformed_spec(transform_dir: str) -> dict:
    return _tft().TFTransformOutput(transform_dir).transformed_feature_spec()


def check_model_inputs(inputs: Sequence[TensorSpec], transformed_spec: dict) -> None:
    """Every model input must be a transformed feature of a type its dtype can take."""
    import tensorflow as tf

    problems = []
    for s in inputs:
        feature = transformed_spec.get(s.name)
        if feature is None:
            problems.append(f"model input {s.name!r} is not a transformed feature")
        elif feature.dtype == tf.string:
            problems.append(f"model input {s.name!r} is a string after Transform (map it to "
                            "ids in the preprocessing_fn)")
    if problems:
        raise ImporterConfigError(
            "The model's inputs do not match the Transform graph: " + "; ".join(problems)
            + f". Transform writes {sorted(transformed_spec)}; the model declares "
            f"{[s.name for s in inputs]}. Name the model's inputs after the features the "
            "preprocessing_fn returns.")


def _dummy(name: str, spec):
    import tensorflow as tf

    if isinstance(spec, tf.io.VarLenFeature):
        value = tf.constant([b"x"] if spec.dtype == tf.string else [1], spec.dtype)
        return tf.SparseTensor([[0, 0]], value, [1, 1])
    shape = [1] + list(spec.shape)
    if spec.dtype == tf.string:
        return tf.fill(shape, b"x")
    return tf.ones(shape, spec.dtype)


def needed_raw_inputs(output, inputs: Sequence[TensorSpec]) -> List[RawInput]:
    """The raw features the model's inputs depend on, in raw-schema order."""
    import tensorflow as tf

    raw_spec = output.raw_feature_spec()
    layer = output.transform_features_layer()
    full = {k: _dummy(k, v) for k, v in raw_spec.items()}
    wanted = {s.name for s in inputs}
    counts = {f.name: f for f in output.raw_metadata.schema.feature}
    needed = []
    for name, spec in raw_spec.items():
        produced = set(layer({k: v for k, v in full.items() if k != name}))
        if wanted <= produced:
            continue  # the model does not depend on it (e.g. the label)
        if isinstance(spec, tf.io.VarLenFeature):
            f = counts.get(name)
            if f is not None and f.HasField("value_count") and \
                    f.value_count.min == f.value_count.max > 0:
                k = int(f.value_count.max)
                shape = () if k == 1 else (k,)
            else:
                shape = (-1,)  # a list of varying length: padded in serving_default
            sparse = True
        else:
            shape, sparse = tuple(int(d) for d in spec.shape), False
        dtype = {tf.string: "string", tf.int64: "int64", tf.float32: "float32"}[spec.dtype]
        needed.append(RawInput(name, dtype, shape, sparse))
    return needed


def wrap(inner_dir: str, out_dir: str, transform_dir: str, inputs: Sequence[TensorSpec],
         output_names: Sequence[str]) -> List[RawInput]:
    """Saves Transform layer + the inner SavedModel (model inputs -> named outputs) as
    ``out_dir`` with raw-feature signatures; returns the raw inputs."""
    import tensorflow as tf

    output = _tft().TFTransformOutput(transform_dir)
    check_model_inputs(inputs, output.transformed_feature_spec())
    raw = needed_raw_inputs(output, inputs)
    inner = tf.saved_model.load(inner_dir)
    model_fn = inner.signatures[SERVING_SIGNATURE]
    module = tf.Module()
    module.inner = inner
    layer = output.transform_features_layer()
    # The Transform graph must be tracked on the module, or its lookup tables are
    # uninitialised after loading. Tracking the transform SavedModel the layer loaded
    # saves the same tables and vocabulary assets in 0.5 s instead of 8 s (saving the
    # Keras layer traces its call functions again); the layer is the fallback.
    loader = getattr(layer, "_saved_model_loader", None)
    imported = getattr(loader, "_imported", None)
    module.transform_graph = imported if imported is not None else layer
    parse_spec = {r.name: output.raw_feature_spec()[r.name] for r in raw}

    def to_model_inputs(features):
        transformed = layer(features)
        return {s.name: tf.cast(transformed[s.name], tf.as_dtype(s.dtype)) for s in inputs}

    def run(model_inputs):
        out = model_fn(**model_inputs)
        return {name: tf.identity(out[name], name=name) for name in output_names}

    signature = [tf.TensorSpec([None, *(None if d < 0 else d for d in r.shape)],
                               tf.as_dtype(r.dtype), name=r.name) for r in raw]

    # The preprocessing half as functions of their own (docs/ARCHITECTURE.md: a
    # Transform-wrapped SavedModel): TrtOptimizer optimizes ``inner`` and keeps these.
    @tf.function(input_signature=[{spec.name: spec for spec in signature}], autograph=False)
    def transform_raw(raw_features):
        features = {}
        for r in raw:
            value = raw_features[r.name]
            if r.ragged:  # padded list -> the SparseTensor TFT reads, padding dropped
                pad = PADDING[r.dtype]
                keep = (tf.logical_not(tf.math.is_nan(value)) if r.dtype == "float32"
                        else tf.not_equal(value, pad))
                where = tf.where(keep)
                value = tf.SparseTensor(where, tf.gather_nd(value, where),
                                        tf.shape(value, out_type=tf.int64))
            elif r.sparse:  # one value per example as TFT reads it: a SparseTensor
                rows = tf.shape(value, out_type=tf.int64)[0]
                flat = tf.reshape(value, [-1])
                per = tf.constant(max(1, int(np.prod(r.shape))), tf.int64)
                index = tf.range(rows * per, dtype=tf.int64)
                value = tf.SparseTensor(tf.stack([index // per, index % per], axis=1), flat,
                                        tf.stack([rows, per]))
            features[r.name] = value
        return to_model_inputs(features)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLE_INPUT)],
                 autograph=False)
    def transform_examples(serialized):
        return to_model_inputs(tf.io.parse_example(serialized, parse_spec))

    @tf.function(input_signature=signature, autograph=False)
    def serve(*args):
        return run(transform_raw({r.name: a for r, a in zip(raw, args, strict=True)}))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLE_INPUT)],
                 autograph=False)
    def serve_examples(serialized):
        return run(transform_examples(serialized))

    module.transform_raw = transform_raw
    module.transform_examples = transform_examples
    module.serve = serve
    module.serve_examples = serve_examples
    tf.saved_model.save(module, out_dir, signatures={
        SERVING_SIGNATURE: serve.get_concrete_function(),
        EXAMPLE_SIGNATURE: serve_examples.get_concrete_function()})
    return raw


def _row_keys(columns: Dict[str, np.ndarray], names: Sequence[str]) -> List[bytes]:
    n = len(columns[names[0]])
    return [b"|".join(np.ascontiguousarray(columns[k][i]).tobytes() for k in names)
            for i in range(n)]


def paired_rows(transform_dir: str, raw_examples: str, transformed_examples: str,
                inputs: Sequence[TensorSpec], count: int, split: str = "eval",
                scan: int = 4096):
    """Up to ``count`` raw eval records and, for each, the materialised record with the
    same transformed values. Returns (raw records, model feeds from the materialised
    records, raw records read, raw records without a counterpart)."""
    import tensorflow as tf

    output = _tft().TFTransformOutput(transform_dir)
    names = [s.name for s in inputs]
    transformed_spec = {n: output.transformed_feature_spec()[n] for n in names}
    materialised = examples.read_records(transformed_examples, scan, split)
    if not materialised:
        return [], {}, 0, 0
    parsed = tf.io.parse_example(tf.constant(materialised), transformed_spec)
    columns = {k: v.numpy() for k, v in parsed.items()}
    by_key: Dict[bytes, int] = {}
    for i, key in enumerate(_row_keys(columns, names)):
        by_key.setdefault(key, i)
    raw = examples.read_records(raw_examples, scan, split)
    layer = output.transform_features_layer()
    raw_spec = output.raw_feature_spec()
    graph = layer(tf.io.parse_example(tf.constant(raw), raw_spec)) if raw else {}
    graph_cols = {n: graph[n].numpy() for n in names} if raw else {}
    picked_raw, picked_rows, unmatched = [], [], 0
    for i, key in enumerate(_row_keys(graph_cols, names) if raw else []):
        j = by_key.get(key)
        if j is None:
            unmatched += 1
        elif len(picked_raw) < count:
            picked_raw.append(raw[i])
            picked_rows.append(j)
    take = np.asarray(picked_rows, dtype=np.int64)
    feeds = {s.name: columns[s.name][take].astype(s.dtype) for s in inputs}
    return picked_raw, feeds, len(raw), unmatched


def verify_chain(serving_dir: str, transform_dir: str, raw_examples: str,
                 transformed_examples: str, inputs: Sequence[TensorSpec],
                 output_names: Sequence[str], torch_run, raw_inputs: Sequence[RawInput],
                 atol: float, rtol: float, batch_sizes: Sequence[int], check_type):
    """PyTorch on Transform's materialised eval features vs the SavedModel on the raw
    records (``serving_tf_example``) and on the raw features (``serving_default``).

    ``torch_run(feeds) -> [outputs]``; ``check_type`` builds one check row
    ``(batch, output, reference, dtype, max_abs, max_rel, mismatches, ok, error)``.
    Returns (checks, summary).
    """
    import tensorflow as tf

    raw, feeds, scanned, unmatched = paired_rows(
        transform_dir, raw_examples, transformed_examples, inputs, max(batch_sizes))
    summary = {"raw_records": scanned, "paired": len(raw), "without_counterpart": unmatched}
    reference = "torch on Transform's materialised features"
    if not raw:
        why = ("no raw eval record has a materialised counterpart: Transform's graph and "
               "its materialised output disagree (skew)" if scanned
               else "no eval records to pair")
        return [check_type(0, name, reference, "unknown", None, None, None, False, why)
                for name in output_names], summary
    loaded = tf.saved_model.load(serving_dir)
    by_example = loaded.signatures[EXAMPLE_SIGNATURE]
    by_features = loaded.signatures[SERVING_SIGNATURE]
    raw_parse = {r.name: r.parse_spec() for r in raw_inputs}

    def raw_features(records):
        parsed = tf.io.parse_example(records, raw_parse)
        return {r.name: (tf.sparse.to_dense(parsed[r.name], PADDING[r.dtype]) if r.ragged
                         else parsed[r.name]) for r in raw_inputs}

    checks = []
    for batch in batch_sizes:
        take = np.arange(batch) % len(raw)
        batch_feeds = {k: v[take] for k, v in feeds.items()}
        records = tf.constant([raw[i] for i in take])
        try:
            want = [np.asarray(o) for o in torch_run(batch_feeds)]
        except Exception as e:
            checks += [check_type(batch, n, reference, "unknown", None, None, None, False,
                                  short_message(e)) for n in output_names]
            continue
        for via, call in (
                (EXAMPLE_SIGNATURE + " on raw tf.Examples",
                 lambda r=records: by_example(**{EXAMPLE_INPUT: r})),
                (SERVING_SIGNATURE + " on raw features",
                 lambda r=records: by_features(**raw_features(r)))):
            try:
                out = call()
                got = [out[n].numpy() for n in output_names]
            except Exception as e:
                checks += [check_type(batch, n, f"{reference} vs {via}", str(w.dtype), None,
                                      None, None, False, short_message(e))
                           for n, w in zip(output_names, want, strict=True)]
                continue
            for name, w, g in zip(output_names, want, got, strict=True):
                c = compare.compare(w, g, atol, rtol)
                checks.append(check_type(batch, name, f"{reference} vs {via}", str(w.dtype),
                                         c.max_abs, c.max_rel, c.mismatches, c.ok, None))
    return checks, summary
