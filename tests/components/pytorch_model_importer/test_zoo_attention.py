"""PyTorchModelImporter on attention, transformer and recurrent models nobody here designed.

nn.TransformerEncoder / nn.TransformerEncoderLayer (eval: PyTorch's fused fast path),
nn.MultiheadAttention returning its weights, HF BertModel with an attention mask, and
a bidirectional LSTM + GRU. The rest of the zoo is in test_zoo.py.
"""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
pytest.importorskip("transformers", reason="needs the [zoo] extra (transformers)")

from tfx_bridge.components.pytorch_model_importer.export import module_rewrites  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402  (the state_dict handovers name zoo:Class, as users name their package)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.TESTED_B)
def test_zoo_model_equivalent_at_batch_1_7_32(zoo_imports, name):
    zoo.assert_equivalent(zoo_imports[name], name)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.TESTED_B)
def test_zoo_model_signature_names_kept(zoo_imports, name):
    zoo.assert_signature_kept(zoo_imports[name], name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["transformer_encoder", "multihead_attention"])
def test_zoo_attention_exported_with_fastpath_off_named_in_report(zoo_imports, name):
    zoo.assert_rewrite_named(zoo_imports[name], module_rewrites.MHA_FASTPATH_OFF)
