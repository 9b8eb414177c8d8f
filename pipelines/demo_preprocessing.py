"""The demo's ``preprocessing_fn`` for stock TFX Transform: one preprocessing graph
for PyTorch training (Transform's materialised examples, read with
:mod:`tfx_bridge.torch_examples`) and for TF Serving (the transform graph).

- ``country`` (a string) -> ``country_id``: a vocabulary computed over the
  span, most frequent first, plus one out-of-vocabulary bucket
  (``COUNTRY_OOV_BUCKETS``), so a country unseen in training maps to the
  vocabulary size.
- ``price`` -> ``price_z``: z-score with the span's mean and deviation.
- ``item_id`` and ``hour`` are kept as ids, ``user_ctr`` as is.
- the label ``clicked`` passes through.

The raw features arrive as the demo schema declares them (one value per
example, ``value_count`` 1..1), which TFT reads as sparse; they are made dense
first, so every transformed feature has a fixed shape ``[]``.

    tfx.components.Transform(examples=..., schema=...,
        preprocessing_fn="tfx_bridge.pipelines.demo_preprocessing.preprocessing_fn")
"""
from __future__ import annotations

from typing import Dict

LABEL = "clicked"
COUNTRY_VOCABULARY = "country"
COUNTRY_OOV_BUCKETS = 1
# Transformed features the demo model reads (names as Transform writes them).
MODEL_FEATURES = ("item_id", "hour", "price_z", "user_ctr", "country_id")


def _dense(x, default):
    """One value per example as a dense [batch] tensor (missing -> ``default``)."""
    import tensorflow as tf

    if isinstance(x, tf.sparse.SparseTensor):
        x = tf.sparse.to_dense(
            tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default)
    return tf.reshape(x, [-1])


def preprocessing_fn(inputs: Dict) -> Dict:
    import tensorflow as tf
    import tensorflow_transform as tft

    country = _dense(inputs["country"], b"")
    return {
        "country_id": tft.compute_and_apply_vocabulary(
            country, num_oov_buckets=COUNTRY_OOV_BUCKETS, vocab_filename=COUNTRY_VOCABULARY),
        "price_z": tft.scale_to_z_score(_dense(inputs["price"], 0.0)),
        "item_id": _dense(inputs["item_id"], tf.constant(0, tf.int64)),
        "hour": _dense(inputs["hour"], tf.constant(0, tf.int64)),
        "user_ctr": _dense(inputs["user_ctr"], 0.0),
        LABEL: _dense(inputs[LABEL], tf.constant(0, tf.int64)),
    }
