"""Model inputs read from an Examples artifact, and tiled to the batch a check needs.

Shared by the importer (equivalence checks on real rows), the optimizer (timing
and drift inputs) and the pusher (warmup requests). No TFX imports; the
Examples folder may be a URI (read through tf.io.gfile).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from tfx_bridge.artifacts import tfrecord
from tfx_bridge.artifacts.tensorspec import TensorSpec
from tfx_bridge.errors import BridgeError, informative_line
from tfx_bridge.storage import fs


class ExamplesError(BridgeError):
    """Examples that cannot give the model's inputs (not tf.Examples, features missing,
    a shape the tf.Example signature cannot parse)."""


def feature_spec(spec: TensorSpec):
    """The tf.io parse spec of a declared input (int64/float32 on the wire)."""
    import tensorflow as tf

    wire = (tf.string if spec.dtype == "string"
            else tf.float32 if spec.dtype.startswith("float") else tf.int64)
    inner = spec.shape[1:]
    if all(d > 0 for d in inner):
        return tf.io.FixedLenFeature(inner, wire)
    if len(inner) == 1:
        return tf.io.VarLenFeature(wire)
    raise ExamplesError(
        f"Input {spec.name!r} {spec.shape}: the tf.Example signature parses fixed shapes or "
        "one variable-length dimension; declare the inner dimensions.")


def parse_examples(serialized, inputs: Sequence[TensorSpec]) -> Dict[str, object]:
    """tf.io.parse_example with the wire dtypes, then a cast to each declared dtype."""
    import tensorflow as tf

    parsed = tf.io.parse_example(serialized, {s.name: feature_spec(s) for s in inputs})
    out = {}
    for s in inputs:
        value = parsed[s.name]
        if isinstance(value, tf.sparse.SparseTensor):
            value = tf.sparse.to_dense(value)
        out[s.name] = tf.cast(value, tf.as_dtype(s.dtype))
    return out


def read_records(examples_dir: str, count: int, split: str = "*") -> List[bytes]:
    """Up to ``count`` serialized records of a split (default: any split) of an
    Examples folder, read with checked headers (a forged length is a refusal)."""
    records: List[bytes] = []
    for path in sorted(fs.glob(fs.join(examples_dir, f"Split-{split}", "*"))):
        for batch in tfrecord.read_batches(path, count, limit=count - len(records)):
            records.extend(batch.records)
        if len(records) >= count:
            break
    return records


def inputs_from_examples(examples_dir: str, inputs: Sequence[TensorSpec], count: int
                         ) -> Optional[Dict[str, np.ndarray]]:
    """Up to ``count`` rows of real inputs parsed from an Examples folder (None if empty)."""
    import tensorflow as tf
    from google.protobuf.message import DecodeError

    records = read_records(examples_dir, count)
    if not records:
        return None
    serialized = tf.constant(records)
    try:
        present = set(tf.train.Example.FromString(records[0]).features.feature)
    except DecodeError as e:
        raise ExamplesError(f"The first record in {examples_dir} is not a tf.Example ({e}). "
                            "Give Examples as ExampleGen writes them.") from e
    missing = [s.name for s in inputs if s.name not in present]
    if missing:
        raise ExamplesError(
            f"The Examples at {examples_dir} lack the model's input(s) {missing} (their "
            f"features: {sorted(present)}). Give Examples of the data the model consumes, "
            "or leave them out to use random inputs.")
    try:
        parsed = parse_examples(serialized, inputs)
    except tf.errors.InvalidArgumentError as e:
        raise ExamplesError(f"The Examples at {examples_dir} do not parse as the model's inputs "
                    f"({', '.join(s.to_text() for s in inputs)}): {informative_line(e)}") from e
    return {spec.name: parsed[spec.name].numpy() for spec in inputs}


def tile_rows(rows: Dict[str, np.ndarray], batch: int, start: int = 0
              ) -> Optional[Dict[str, np.ndarray]]:
    """``batch`` rows taken cyclically from ``start``; None when ``rows`` is empty."""
    n = len(next(iter(rows.values()))) if rows else 0
    if not n:
        return None
    take = (start + np.arange(batch)) % n
    return {k: v[take] for k, v in rows.items()}
