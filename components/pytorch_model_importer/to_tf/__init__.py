"""ONNX -> TF SavedModel converters: the importer's own (core.py + ops/) and onnx2tf."""
