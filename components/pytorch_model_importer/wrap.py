"""Import stage 4: the converted SavedModel re-saved with the declared signatures.

``serving_default`` takes exactly the declared input names, dtypes and shapes
and returns the declared output names (whichever converter made the graph);
``serving_tf_example`` takes serialized tf.Examples (string [None]), parses
int64/float32 from the wire and casts to the declared dtypes, so TFX Evaluator
and InfraValidator, which need one DT_STRING input, work. No TFX imports.
"""
from __future__ import annotations

import re
from typing import List, Sequence

from tfx_bridge.artifacts import examples
from tfx_bridge.artifacts.savedmodel import EXAMPLE_SIGNATURE, SERVING_SIGNATURE
from tfx_bridge.components.pytorch_model_importer.errors import (
    ConversionError,
    ImporterConfigError,
)
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec

EXAMPLE_INPUT = "examples"


def _output_order(keys: Sequence[str], output_names: Sequence[str]) -> List[str]:
    """The converted function's output keys in the model's output order (onnx2tf
    renames outputs output_0, output_1, ...)."""
    if set(keys) == set(output_names):
        return list(output_names)
    numbered = sorted(keys, key=lambda k: int(re.findall(r"\d+", k)[-1])
                      if re.findall(r"\d+", k) else -1)
    if len(numbered) != len(output_names):
        raise ConversionError(
            f"The converted model has outputs {sorted(keys)}; expected {len(output_names)} "
            f"({list(output_names)}).")
    return numbered


def converted_callable(converted):
    """(what the SavedModel must keep, the function, its inputs by name, call(feed))
    of a converter's result: a SavedModel folder (onnx2tf) or our in-memory one."""
    import tensorflow as tf

    if isinstance(converted, str):
        holder = tf.saved_model.load(converted)
        fn = holder.signatures[SERVING_SIGNATURE]

        def call(feed):
            return fn(**feed)

        return holder, fn, fn.structured_input_signature[1], call
    holder, fn = converted.module, converted.serve
    positional = list(fn.structured_input_signature[0])

    def call_positional(feed):
        return fn(*[feed[s.name] for s in positional])

    return holder, fn, {s.name: s for s in positional}, call_positional


def wrap_saved_model(converted, out_dir: str, inputs: Sequence[TensorSpec],
                     output_names: Sequence[str], schema=None,
                     unused: Sequence[str] = (), row_wise: bool = False) -> None:
    """Saves the declared ``serving_default`` and the tf.Example signature.

    ``converted`` is a converter's SavedModel folder, or our converter's
    in-memory result (tfx_bridge.onnx_tf.Converted: its module and concrete function),
    which saves a SavedModel write and load per import. ``unused``: declared
    inputs the model never reads (absent from the exported graph): the
    signatures take them, as clients send them, and ignore them. ``row_wise``:
    ``converted`` is right for one row at a time (exported at batch 1 because
    the model's code loops over or sizes by the batch); the signatures run it
    on each row (tf.map_fn) and stack the results.
    """
    import tensorflow as tf

    if schema is not None:
        check_inputs_against_schema(inputs, schema)
    holder, fn, converted_inputs, call = converted_callable(converted)
    by_name = {}
    for spec in inputs:
        candidates = [spec.name, re.sub(r"[^A-Za-z0-9_]", "_", spec.name)]
        found = next((c for c in candidates if c in converted_inputs), None)
        if found is None and spec.name in unused:
            continue
        if found is None:
            raise ConversionError(
                f"The converted model has inputs {sorted(converted_inputs)}; no match for "
                f"{spec.name!r}.")
        by_name[spec.name] = found
    order = _output_order(list(fn.structured_outputs), output_names)

    module = tf.Module()
    module.converted = holder
    specs = [tf.TensorSpec([None if d < 0 else d for d in s.shape], tf.as_dtype(s.dtype),
                           name=s.name) for s in inputs]

    # autograph=False: plain TF ops, no tensor-dependent Python control flow; autograph's
    # source transform would only add a second or so per import.
    read = [s for s in inputs if s.name in by_name]
    out_types = [fn.structured_outputs[key].dtype for key in order]

    def rows(feed):
        """``call`` on each row of ``feed`` as a batch of one, stacked back."""
        def one(row):
            out = call({k: tf.expand_dims(v, 0) for k, v in zip(feed, row, strict=True)})
            return [out[key][0] for key in order]

        stacked = tf.map_fn(one, tuple(feed.values()), fn_output_signature=[
            tf.TensorSpec(None, t) for t in out_types])
        return dict(zip(order, stacked, strict=True))

    @tf.function(input_signature=specs, autograph=False)
    def serve(*args):
        given = dict(zip([s.name for s in inputs], args, strict=True))
        feed = {by_name[s.name]: tf.cast(given[s.name], converted_inputs[by_name[s.name]].dtype)
                for s in read}
        out = rows(feed) if row_wise else call(feed)
        return {name: tf.identity(out[key], name=name)
                for name, key in zip(output_names, order, strict=True)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLE_INPUT)],
                 autograph=False)
    def serve_examples(serialized):
        parsed = examples.parse_examples(serialized, inputs)
        return serve(*[parsed[s.name] for s in inputs])

    module.serve = serve
    module.serve_examples = serve_examples
    tf.saved_model.save(module, out_dir, signatures={
        SERVING_SIGNATURE: serve.get_concrete_function(),
        EXAMPLE_SIGNATURE: serve_examples.get_concrete_function()})


def check_inputs_against_schema(inputs: Sequence[TensorSpec], schema) -> None:
    """Every input must be a schema feature whose type the declared dtype can take."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    types = {f.name: schema_pb2.FeatureType.Name(f.type) for f in schema.feature}
    problems = []
    for s in inputs:
        want = "FLOAT" if s.dtype.startswith("float") else "INT"
        if s.name not in types:
            problems.append(f"input {s.name!r} is not a schema feature")
        elif types[s.name] != want:
            problems.append(f"input {s.name!r} is {s.dtype} but the schema says {types[s.name]}")
    if problems:
        raise ImporterConfigError(
            "The tf.Example signature cannot parse with the schema: " + "; ".join(problems)
            + ". Name inputs after features and match their types.")

