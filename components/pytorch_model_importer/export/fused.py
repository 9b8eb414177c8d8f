"""ONNX forms for PyTorch's fused kernels recorded in traced TorchScript files.

Imported only when a torch module is exported (torch is the ``onnx`` extra).

A TorchScript file traced the usual way (``model.eval()``, ``torch.no_grad()``,
``torch.jit.trace``) of a model holding ``nn.TransformerEncoder(Layer)``,
``nn.MultiheadAttention`` or ``nn.EmbeddingBag`` records the fused kernels
below; their code is compiled, so module_rewrites.py cannot reach them. For the duration
of an export, :func:`onnx_symbolics` registers an ONNX symbolic for each that
writes the same math with standard ONNX ops (no Loop, default domain only):

- ``aten::_transformer_encoder_layer_fwd``: layer norms (pre or post,
  ``norm_first``), self-attention, residuals, and the feed-forward block with
  relu or exact (erf) gelu;
- ``aten::_native_multi_head_attention``: in-projection (one MatMul when q, k
  and v are the same tensor, three otherwise), scaled scores, the mask
  (``mask_type`` 0 ``[L, S]``, 1 key padding ``[B, S]``, 2 ``[B, H, L, S]``; a
  float mask counts as a boolean one, non-zero = masked, as the kernel reads
  it), softmax, out-projection, and the weights when ``need_weights``
  (averaged over heads with ``average_attn_weights``);
- ``aten::_nested_tensor_from_mask`` / ``aten::to_padded_tensor``: the
  nested-tensor path ``nn.TransformerEncoder`` takes with a
  ``src_key_padding_mask``. The nested tensor stays the padded dense tensor and
  its mask becomes the key padding mask of the layers that read it; padded
  positions come out as the padding value, as ``to_padded_tensor`` gives;
- ``aten::embedding_bag``: fixed-width 2-D ids (offsets ``arange(0, N, W)``, as
  ``F.embedding_bag`` writes them) as a Gather over ``[B, W]`` and a
  reduction; ragged 1-D ids + offsets scattered (ScatterND, segment ids by
  ScatterElements + CumSum, or a comparison below opset 16) into a padded
  ``[B, max_len, D]`` block, then the same reduction. Modes sum (with
  ``per_sample_weights``), mean and max; ``padding_idx`` is left out of every
  reduction and an empty or all-padding bag gives zeros, as PyTorch does.

:func:`fused_kernels` lists the kernels a TorchScript module's graph holds, and
:func:`rewrites` turns them into the import report's entries. The symbolics
live by kernel family: fused_attention.py (encoder layer, multi-head attention,
the nested-tensor pair) and fused_embedding_bag.py.

"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Sequence, Tuple

import torch

from tfx_bridge.components.pytorch_model_importer.export import (
    fused_attention,
    fused_embedding_bag,
)
from tfx_bridge.components.pytorch_model_importer.export.fused_attention import (
    ENCODER_LAYER,
    MULTI_HEAD_ATTENTION,
)
from tfx_bridge.components.pytorch_model_importer.export.fused_embedding_bag import (
    EMBEDDING_BAG,
)
from tfx_bridge.components.pytorch_model_importer.export.registry import OPSETS, registered

FUSED_KERNEL_DECOMPOSED = "fused-kernel-decomposed"  # the report's rewrite kind

# The kernels named in the report; the nested-tensor pair comes with the encoder.
_REPORTED = (ENCODER_LAYER, MULTI_HEAD_ATTENTION, EMBEDDING_BAG)
_SYMBOLICS = {**fused_attention.SYMBOLICS, **fused_embedding_bag.SYMBOLICS}


@contextlib.contextmanager
def onnx_symbolics(opsets: Sequence[int] = OPSETS) -> Iterator[None]:
    """Registers the fused kernels' ONNX symbolics for the block, then unregisters them.

    Process-wide while the block runs (torch.onnx's registry is global): run
    one export at a time inside it.
    """
    fused_attention.forget_nested()
    try:
        with registered({name: (fn, opsets) for name, fn in _SYMBOLICS.items()}):
            yield
    finally:
        fused_attention.forget_nested()


# --------------------------------------------------------------------------- report

def _calls(graph) -> List[str]:
    """The reported fused kernels ``graph`` calls itself (not through submodules)."""
    found: List[str] = []

    def walk(block) -> None:
        for node in block.nodes():
            if node.kind() in _REPORTED:
                found.append(node.kind())
            for sub in node.blocks():
                walk(sub)

    walk(graph)
    return found


def fused_kernels(module) -> List[Tuple[str, str]]:
    """(kernel, qualified module name) per fused kernel call in a TorchScript module.

    Read from each submodule's own forward graph (a traced module records an
    op in the forward of the module that ran it), so names hold for a file
    loaded with torch.jit.load too, where trace scopes are gone. '(root)' is
    the root's own forward; a module that is not TorchScript gives [].
    """
    if isinstance(module, torch.jit.ScriptFunction):
        return [(kind, "(root)") for kind in _calls(module.graph)]
    if not isinstance(module, torch.jit.ScriptModule):
        return []
    found: List[Tuple[str, str]] = []
    for name, sub in module.named_modules():
        try:
            graph = sub.graph
        except (AttributeError, RuntimeError):  # no forward
            continue
        found.extend((kind, name or "(root)") for kind in _calls(graph))
    return found


def rewrites(module) -> list:
    """The import report's entry for the fused kernels of ``module`` ([] when none)."""
    from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite

    found = fused_kernels(module)
    if not found:
        return []
    kinds = sorted({kind.split("::", 1)[1] for kind, _ in found})
    return [Rewrite(
        FUSED_KERNEL_DECOMPOSED, [f"{name} ({kind})" for kind, name in found],
        f"the TorchScript graph calls PyTorch's fused kernels ({', '.join(kinds)}), which "
        "have no ONNX form (or, for embedding_bag, a Loop): exported as the same math in "
        "standard ONNX ops")]
