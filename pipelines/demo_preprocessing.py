"""The demo's ``preprocessing_fn`` for stock TFX Transform: one preprocessing graph
for PyTorch training (Transform's materialised examples, read with
:mod:`tfx_bridge.torch.examples`) and for TF Serving (the transform graph).

- ``country`` (a string) -> ``country_id``: a vocabulary computed over the
  span, most frequent first, plus one out-of-vocabulary bucket
  (``COUNTRY_OOV_BUCKETS``), so a country unseen in training maps to the
  vocabulary size.
- ``price`` -> ``price_z``: z-score with the span's mean and deviation.
- ``item_id`` and ``hour`` are kept as ids, ``user_ctr`` as is.
- ``item_seen``: 1 when ``item_id`` is in the user's ``hist_items`` (a list of
  any length), else 0; ``is_returning`` as 0/1.
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
# demo_models.CtrTransformed's forward() argument order (transformed feature names).
MODEL_FEATURES = ("item_id", "hour", "country_id", "price_z", "user_ctr", "item_seen",
                  "is_returning")


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
    item = _dense(inputs["item_id"], tf.constant(0, tf.int64))
    history = inputs["hist_items"]  # a variable-length list: sparse [batch, n]
    history = tf.sparse.to_dense(history, tf.constant(-1, history.dtype))
    seen = tf.reduce_any(tf.equal(history, tf.expand_dims(item, 1)), axis=1)
    return {
        "country_id": tft.compute_and_apply_vocabulary(
            country, num_oov_buckets=COUNTRY_OOV_BUCKETS, vocab_filename=COUNTRY_VOCABULARY),
        "price_z": tft.scale_to_z_score(_dense(inputs["price"], 0.0)),
        "item_id": item,
        "item_seen": tf.cast(seen, tf.int64),
        "is_returning": _dense(inputs["is_returning"], tf.constant(0, tf.int64)),
        "hour": _dense(inputs["hour"], tf.constant(0, tf.int64)),
        "user_ctr": _dense(inputs["user_ctr"], 0.0),
        LABEL: _dense(inputs[LABEL], tf.constant(0, tf.int64)),
    }
