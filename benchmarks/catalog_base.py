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
