"""The onnx2tf fallback converter, in one place: the call (convert.py), the graph
rewrites onnx2tf needs (graph_rewrites.py) and the child process it runs in
(runner.py). to_tf.py decides when it runs."""
