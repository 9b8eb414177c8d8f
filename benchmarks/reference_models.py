"""The reference models of ``tfx_bridge.pipelines.demo_models`` as benchmark rows: how
each is handed over to the importer (a ``state_dict`` and its class), the way
``zoo.hand_over`` hands over the importer's test zoo.

Used by ``import_models.py`` and ``converter_latency.py``.
"""
from __future__ import annotations

import os

import torch

from tfx_bridge.components.pytorch_model_importer.source import ModelSource
from tfx_bridge.pipelines import demo_models


def hand_over(name: str, folder: str) -> ModelSource:
    """Saves reference model ``name``'s weights under ``folder``: its ModelSource."""
    cls, kwargs, _, _ = demo_models.REFERENCE_MODELS[name]
    path = os.path.join(folder, f"{name}.pt")
    torch.save(demo_models.build(name).state_dict(), path)
    return ModelSource("state_dict", path, f"tfx_bridge.pipelines.demo_models:{cls.__name__}",
                       kwargs)
