"""A detector's converted graph (one ``[3, H, W]`` image in, torchvision's dict out)
saved with the TF Object Detection API's ``serving_default`` and torchvision's own
layout as ``serving_torchvision`` (detection.py says both). No TFX imports.
"""
from __future__ import annotations

from typing import Sequence

from tfx_bridge.artifacts.savedmodel import SERVING_SIGNATURE
from tfx_bridge.components.pytorch_model_importer import detection
from tfx_bridge.components.pytorch_model_importer.errors import ConversionError
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec
from tfx_bridge.components.pytorch_model_importer.wrap import converted_callable


def wrap_detector(converted, out_dir: str, spec: TensorSpec, raw_names: Sequence[str],
                  k: int) -> None:
    """Saves both signatures into ``out_dir``. ``raw_names``: the converted graph's
    outputs (torchvision's keys); ``k``: detections per image, the padded size."""
    import tensorflow as tf

    holder, fn, converted_inputs, call = converted_callable(converted)
    if len(converted_inputs) != 1:
        raise ConversionError(f"The converted detector takes {sorted(converted_inputs)}; "
                              "expected one image.")
    image_name = next(iter(converted_inputs))
    keys = set(fn.structured_outputs)
    if not set(raw_names) <= keys:
        raise ConversionError(f"The converted detector returns {sorted(keys)}; expected "
                              f"{list(raw_names)}.")
    names = detection.served_outputs(raw_names)

    def detect(image):
        """torchvision's dict for one [3, H, W] float image in [0, 1]."""
        out = call({image_name: image})
        return {key: out[key] for key in raw_names}

    def padded(value, rows):
        """The first ``rows`` detections (at most K) padded with zeros to K."""
        value = value[:rows]
        pad = [[0, k - rows]] + [[0, 0]] * (len(value.shape) - 1)
        return tf.pad(value, pad)

    def od_one(image):
        hw = tf.cast(tf.shape(image)[1:3], tf.float32)
        out = detect(image)
        rows = tf.minimum(tf.shape(out["boxes"])[0], k)
        x1, y1, x2, y2 = tf.unstack(out["boxes"], axis=1)
        h, w = hw[0], hw[1]
        boxes = tf.stack([y1 / h, x1 / w, y2 / h, x2 / w], axis=1)
        result = [padded(boxes, rows), padded(out["scores"], rows),
                  padded(tf.cast(out["labels"], tf.float32), rows), tf.cast(rows, tf.float32)]
        if "masks" in out:
            result.append(padded(out["masks"][:, 0], rows))
        if "keypoints" in out:
            xy = out["keypoints"][..., :2]
            yx = tf.stack([xy[..., 1] / h, xy[..., 0] / w], axis=-1)
            result += [padded(yx, rows), padded(out["keypoints_scores"], rows)]
        return result

    signature = []
    for name in names:
        shape = {detection.BOXES: [k, 4], detection.SCORES: [k], detection.CLASSES: [k],
                 detection.NUM: [], detection.MASKS: [k, None, None],
                 detection.KEYPOINTS: [k, None, 2],
                 detection.KEYPOINT_SCORES: [k, None]}[name]
        signature.append(tf.TensorSpec(shape, tf.float32))
    h, w = (None if d < 0 else d for d in spec.shape[1:3])
    dtype = tf.as_dtype(spec.dtype)

    # autograph=False: plain TF ops; the batch is mapped image by image because each
    # image has its own detection count before padding.
    @tf.function(input_signature=[tf.TensorSpec([None, h, w, 3], dtype, name=spec.name)],
                 autograph=False)
    def serve(images):
        chw = tf.transpose(tf.cast(images, tf.float32) / 255.0, [0, 3, 1, 2])
        stacked = tf.map_fn(od_one, chw, fn_output_signature=signature)
        return {name: tf.identity(value, name=name)
                for name, value in zip(names, stacked, strict=True)}

    @tf.function(input_signature=[tf.TensorSpec([3, h, w], tf.float32,
                                                name=detection.RAW_INPUT)], autograph=False)
    def serve_raw(image):
        out = detect(image)
        return {key: tf.identity(out[key], name=key) for key in raw_names}

    module = tf.Module()
    module.converted = holder
    module.serve = serve
    module.serve_raw = serve_raw
    tf.saved_model.save(module, out_dir, signatures={
        SERVING_SIGNATURE: serve.get_concrete_function(),
        detection.RAW_SIGNATURE: serve_raw.get_concrete_function()})
