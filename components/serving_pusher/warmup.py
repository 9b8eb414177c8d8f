"""TF Serving warmup requests: synthesized from Examples or random, written as PredictionLogs.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from tfx_bridge.artifacts.savedmodel import SERVING_SIGNATURE
from tfx_bridge.components.serving_pusher.base_layout import (
    MAX_WARMUP,
)
from tfx_bridge.storage import fs


def write_warmup(path: str, model_name: str, signature: dict, feeds: Sequence[Dict],
                 signature_name: str = SERVING_SIGNATURE) -> int:
    """assets.extra/tf_serving_warmup_requests: PredictionLog records (at most 1000)."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    feeds = list(feeds)[:MAX_WARMUP]
    fs.makedirs(fs.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for feed in feeds:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name))
            for name, value in feed.items():
                dtype = signature["inputs"][name]["dtype"]
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value, dtype=dtype))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return len(feeds)


def synthesize_feeds(signature: dict, count: int, batch: int = 1,
                     examples_dir: Optional[str] = None,
                     representative: Sequence[str] = ()) -> List[Dict]:
    """Warmup inputs: from Examples when given, else within each input's dtype, sized
    as ``representative`` says (the model report's specs) where the signature leaves
    a size open."""
    from tfx_bridge.artifacts import examples
    from tfx_bridge.artifacts.tensorspec import TensorSpec, make_inputs, parse_input_spec

    sized = {}
    for text in representative:
        spec = parse_input_spec(text)
        sized[spec.name] = spec
    specs = []
    for name, s in sorted(signature["inputs"].items()):
        shape = s["shape"] or [None]
        dims = tuple(-1 if d is None else int(d) for d in shape)
        dims = (-1,) + dims[1:]
        known = sized.get(name)
        if known is not None and len(known.shape) == len(dims) and all(
                d in (-1, k) for d, k in zip(dims[1:], known.shape[1:], strict=True)):
            dims = (-1,) + tuple(known.shape[1:])
        specs.append(TensorSpec(name, s["dtype"], dims))
    if examples_dir:
        real = examples.inputs_from_examples(examples_dir, specs, count * batch)
        if real and examples.tile_rows(real, batch) is not None:
            return [examples.tile_rows(real, batch, start=i * batch) for i in range(count)]
    return [make_inputs(specs, batch, seed=i) for i in range(count)]


