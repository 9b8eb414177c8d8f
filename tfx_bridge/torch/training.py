"""What a PyTorchTrainer ``run_fn`` calls rather than rewrites: a seeded,
deterministic training loop with progress lines, an eval pass, binary AUC.

The same data, seed and device give bit-identical weights: :func:`seed_everything`
seeds Python, numpy and torch and turns on ``torch.use_deterministic_algorithms``;
the reader (:mod:`tfx_bridge.torch.examples`) shuffles with its own seed. CPU is
the default device; ``device("auto")`` takes CUDA when present (still
deterministic, at some speed cost, with ``CUBLAS_WORKSPACE_CONFIG`` set here).

torch is imported when this module is; no TFX imports.

Example:
  >>> import torch
  >>> seed_everything(0)
  >>> model = torch.nn.Linear(1, 1)
  >>> data = [{"x": torch.ones(4, 1), "y": torch.full((4, 1), 2.0)}] * 3
  >>> loss = lambda m, b: torch.nn.functional.mse_loss(m(b["x"]), b["y"])
  >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
  >>> fit(model, data, loss, opt, epochs=2, log=None)["steps"]
  6
"""
from __future__ import annotations

import logging
import math
import os
import random
import time
from typing import Callable, Dict, Iterable, Optional

import numpy as np

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised by the layout tests' idiom
    raise ImportError("tfx_bridge.torch.training needs torch: "
                      "pip install 'tfx-bridge[onnx]'") from e

from tfx_bridge.errors import BridgeError

_log = logging.getLogger("tfx_bridge.training")


class TrainingError(BridgeError):
    """Training that cannot go on (a non-finite loss, no data); says where."""


def seed_everything(seed: int) -> None:
    """Seeds Python, numpy and torch and makes torch's kernels deterministic."""
    # cuBLAS needs a fixed workspace for deterministic matmuls (ignored on CPU).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


def device(which: str = "cpu") -> torch.device:
    """``"cpu"`` (default), ``"cuda"``, or ``"auto"``: CUDA when available."""
    if which == "auto":
        which = "cuda" if torch.cuda.is_available() else "cpu"
    if which == "cuda" and not torch.cuda.is_available():
        raise TrainingError("device 'cuda' asked for, but torch sees no CUDA device; use "
                            "'cpu' or 'auto'.")
    return torch.device(which)


def _to(batch: Dict[str, torch.Tensor], dev) -> Dict[str, torch.Tensor]:
    return {k: v.to(dev) for k, v in batch.items()}


def fit(model: torch.nn.Module, batches: Iterable[Dict[str, torch.Tensor]],
        loss_fn: Callable, optimizer, epochs: int = 1, max_steps: Optional[int] = None,
        dev: Optional[torch.device] = None, log_every: int = 50,
        log: Optional[Callable[[str], None]] = _log.info) -> Dict[str, float]:
    """Trains ``model`` on ``batches`` (e.g. an ExamplesDataset) for ``epochs`` or
    ``max_steps`` optimizer steps, whichever comes first.

    ``loss_fn(model, batch)`` returns the mean loss of a batch. Calls
    ``batches.set_epoch(epoch)`` when it has one (a reshuffle per epoch). A
    progress line goes to ``log`` every ``log_every`` steps and at the end.
    A non-finite loss stops training with the step and epoch. Under a distributed
    run (:mod:`tfx_bridge.torch.distributed`) the model is wrapped in
    DistributedDataParallel: give each rank its shard of the data
    (``ExamplesDataset(..., shard=distributed.world())``).
    Returns ``{"steps", "epochs", "train_loss" (last step), "seconds",
    "epoch_records"}``: ``epoch_records`` is how many records the first epoch
    trained on, summed over the ranks (each rank's whole shard: the split's
    record count when every record was read once), or None when training
    stopped before the first epoch ended.
    """
    import contextlib

    from tfx_bridge.torch import distributed

    dev = dev or torch.device("cpu")
    model.to(dev).train()
    trained, uneven = model, contextlib.nullcontext()
    if distributed.world()[1] > 1:
        # Gradients averaged across ranks; join() lets a rank whose shard ends first
        # stop without leaving the others waiting in an all-reduce.
        trained = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[torch.cuda.current_device() if dev.index is None
                               else dev.index] if dev.type == "cuda" else None)
        uneven = trained.join()
    start, step, loss_value, epoch = time.monotonic(), 0, float("nan"), 0
    with uneven:
        step, loss_value, epoch, first = _loop(trained, batches, loss_fn, optimizer, epochs,
                                               max_steps, dev, log_every, log)
    total, first = _across_ranks(step, first, trained is not model, dev)
    if total == 0:
        raise TrainingError("No batch to train on: the training split is empty.")
    model.eval()
    seconds = time.monotonic() - start
    if log:
        log(f"trained {step} steps ({epoch + 1} epochs) in {seconds:.1f} s, "
            f"last loss {loss_value:.5f}")
    return {"steps": step, "epochs": epoch + 1, "train_loss": loss_value, "seconds": seconds,
            "epoch_records": first}


def _across_ranks(step: int, first: Optional[int], distributed_run: bool, dev):
    """(steps, first epoch's records) summed across the ranks: a rank whose shard
    was empty is no error while the others trained (joined above); the records
    are None unless every rank finished its first epoch."""
    if not distributed_run:
        return step, first
    import torch.distributed as dist

    both = torch.tensor([step, -1 if first is None else first, first is None],
                        device=dev if dev.type == "cuda" else "cpu")
    dist.all_reduce(both)
    steps, records, unfinished = (int(v) for v in both.tolist())
    return steps, None if unfinished else records


def _loop(model, batches, loss_fn, optimizer, epochs, max_steps, dev, log_every, log):
    step, loss_value, epoch, seen, first = 0, float("nan"), 0, 0, None
    for epoch in range(epochs):
        if hasattr(batches, "set_epoch"):
            batches.set_epoch(epoch)
        for batch in batches:
            if epoch == 0:
                seen += len(next(iter(batch.values())))
            loss = loss_fn(model, _to(batch, dev))
            loss_value = float(loss.detach())
            if not math.isfinite(loss_value):
                raise TrainingError(f"The loss is {loss_value} at step {step + 1} (epoch "
                                    f"{epoch}): lower the learning rate or check the inputs.")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if log and log_every and step % log_every == 0:
                log(f"step {step} epoch {epoch} loss {loss_value:.5f}")
            if max_steps is not None and step >= max_steps:
                break
        else:  # the epoch ran to its end
            first = seen if epoch == 0 else first
            continue
        break
    return step, loss_value, epoch, first


@torch.no_grad()
def predict(model: torch.nn.Module, batches: Iterable[Dict[str, torch.Tensor]],
            forward: Callable, label: str, dev: Optional[torch.device] = None):
    """``(scores, labels)`` as flat float64 numpy arrays over every batch, where
    ``forward(model, batch)`` returns one score per example."""
    dev = dev or torch.device("cpu")
    model.to(dev).eval()
    scores, labels = [], []
    for batch in batches:
        batch = _to(batch, dev)
        scores.append(forward(model, batch).reshape(-1).double().cpu().numpy())
        labels.append(batch[label].reshape(-1).double().cpu().numpy())
    if not scores:
        raise TrainingError("No batch to evaluate: the eval split is empty.")
    return np.concatenate(scores), np.concatenate(labels)


def binary_auc(scores: np.ndarray, labels: np.ndarray) -> Optional[float]:
    """ROC AUC of ``scores`` for 0/1 ``labels`` (ties count half); None when one
    class is absent (AUC is undefined, not 0)."""
    labels = np.asarray(labels) > 0.5
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if not positives or not negatives:
        return None
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = np.asarray(scores)[order]
    # Average ranks over ties.
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2)
                 / (positives * negatives))


def binary_log_loss(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mean binary cross-entropy of probabilities ``scores`` (clipped to 1e-7)."""
    p = np.clip(np.asarray(scores, dtype=np.float64), 1e-7, 1 - 1e-7)
    y = np.asarray(labels, dtype=np.float64)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
