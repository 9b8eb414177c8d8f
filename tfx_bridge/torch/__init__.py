"""PyTorch inside TFX artifacts (torch is imported only by the modules that need it).

- ``model``: ``Format-PyTorch/`` inside a Model (state_dict, ``model_spec.json``,
  metrics, the span trained on), module classes, warm start.
- ``examples``: an Examples split as a PyTorch ``IterableDataset`` of typed,
  range-checked batches.
- ``training``: what a ``run_fn`` calls: seeding, the training loop with
  progress lines, predictions, AUC and log loss.
"""
