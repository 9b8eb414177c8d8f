"""The importer's torch -> ONNX side (import stage 2). No TFX imports; torch and
onnx are imported lazily, when a torch module is exported.

One word for one idea: a *rewrite* is a change the importer makes so a model
converts, each named in the import report (``report.json`` ``rewrites``) by its
kind. The kinds are part of the artifact and never change. Here, the rewrites
in force while torch exports:

- stage.py: the export stage itself, ``torch.onnx.export`` with the rewrites
  below around it, or a handed-over ONNX file renamed to the declared signature;
- module_rewrites.py: PyTorch-level rewrites (modules swapped, switches set
  for the export);
- fused.py: ONNX symbolics for PyTorch's fused kernels recorded in TorchScript
  graphs, by kernel family: fused_attention.py, fused_embedding_bag.py (with
  onnx_ops.py's graph helpers);
- symbolic_rewrites.py: torch symbolics that export wrongly or not at all,
  replaced; it registers complex_pairs.py (complex values as real pairs),
  spectral.py (torch.fft, torch.stft), grids.py (affine_grid below opset 20),
  searchsorted.py, patches.py (fold below opset 18),
  scatter_reduce.py and integer_bitwise.py;
- retrace.py: a loaded TorchScript module traced again through its own graph
  when its export needed shapes the saved graph lacks;
- registry.py: torch.onnx's symbolic registry for a block, and torch's own
  symbolics kept for the calls ours leave to it.
"""
