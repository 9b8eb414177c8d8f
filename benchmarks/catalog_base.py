"""What every catalog family shares: the seed, the tiny sequence length, the
:class:`Built` record a builder returns and the exceptions that say a model is
not a converter row (:class:`NotBuilt`, :class:`Skipped`, :class:`Excluded`).

The families live in ``catalog.py`` (torchvision, and the dispatcher every
caller uses), ``catalog_transformers.py`` and ``catalog_torch_nn.py`` (with
``catalog_torch_nn_patterns.py``).
"""
from __future__ import annotations

import dataclasses
from typing import List

import numpy as np
import torch
from torch import nn

SEQ_LEN = 8
SEED = 0


class NotBuilt(Exception):
    """The architecture cannot be built (or run) from the catalog's config: not a converter
    failure."""


class Skipped(Exception):
    """Deliberately left out: too large."""


class Excluded(Exception):
    """Not part of the family: a transformers architecture whose main input is not
    ``input_ids``."""


@dataclasses.dataclass
class Built:
    """A built model and how it is declared and handed over."""

    module: nn.Module
    inputs: List[str]  # importer specs, name:dtype:shape[:lo..hi]
    outputs: List[str]
    module_class: str
    module_kwargs: dict
    input_size: str
    params: int


def fill_zero_weights(module, seed: int = SEED) -> List[str]:
    """Every all-zero weight matrix or kernel of ``module`` (a head a builder
    zero-initialises, as torchvision's ViT does) drawn from N(0, 0.02), seeded, in place;
    the names filled. A trained model has no such tensor, and with one its output can
    be a constant that every converter matches without computing anything."""
    generator = torch.Generator().manual_seed(seed)
    filled = []
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2 and p.is_floating_point() and not bool(p.any()):
                p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * 0.02)
                filled.append(name)
    return filled


def _input_independent(ref) -> bool:
    """True when every float output of a random batch has the same value in each row."""
    floats = [r for r in ref if np.issubdtype(r.dtype, np.floating) and r.ndim and len(r) > 1]
    return bool(floats) and all(np.array_equal(r, np.broadcast_to(r[:1], r.shape))
                                for r in floats)


def varying_reference(module, run) -> tuple:
    """(``run()``'s outputs, the weights filled): where the outputs are the same for
    every row of the random batch (a zero-initialised head), the zero weights are
    drawn (:func:`fill_zero_weights`) and ``run`` again; still constant: NotBuilt,
    since a check against a constant proves nothing."""
    ref, filled = run(), []
    if _input_independent(ref):
        filled = fill_zero_weights(module)
        if filled:
            ref = run()
        if _input_independent(ref):
            raise NotBuilt("the output does not depend on the input (the same for every "
                           "row of a random batch): a check would prove nothing")
    return ref, filled
