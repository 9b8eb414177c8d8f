"""onnx2tf 1.24.1, run by convert.convert() as ``python -m`` in a child process.

Arguments: the private ONNX copy (onnx2tf rewrites it in place), the output folder, and
comma-separated input names whose shapes are kept exactly (NCHW stays NCHW). onnx2tf sets
process-wide TF and logging globals, hence the child process. Its own save path writes
two TFLite files after the SavedModel (thrown away here, as long as the conversion), so
the Keras model is taken in memory (disable_model_save) and saved here.
"""


def save_keras_model(model, out_dir: str) -> None:
    """onnx2tf's in-memory Keras model as a SavedModel with ``serving_default``.

    A plain tf.Module holding the variables, not the Keras model: saving the Keras
    object (tf_keras' ExportArchive) re-traces every layer for its own
    serialization, 12 of the 20 s a small model's conversion took; the signature
    (input names, output_0..N) is the same. The conformance benchmark saves its
    onnx2tf column the same way.
    """
    import tensorflow as tf

    module = tf.Module()
    module.weights = list(model.variables)
    serve = tf.function(lambda *inputs: model(inputs), autograph=False,
                        input_signature=[tf.TensorSpec(t.shape, t.dtype, t.name)
                                         for t in model.inputs])
    module.serve = serve
    tf.saved_model.save(module, out_dir,
                        signatures={"serving_default": serve.get_concrete_function()})


def main() -> None:
    import sys

    import onnx2tf
    keep = [n for n in sys.argv[3].split(",") if n]
    model = onnx2tf.convert(input_onnx_file_path=sys.argv[1], output_folder_path=sys.argv[2],
                            keep_shape_absolutely_input_names=keep or None, non_verbose=True,
                            disable_model_save=True)
    save_keras_model(model, sys.argv[2])


if __name__ == "__main__":
    main()
