"""The importer's declared signature: input specs (artifacts.tensorspec) and output names.

No TFX, torch or TF imports: the CLI parses specs before loading anything heavy.

  user_id:int64:-1:0..49999      a batch of ids, values drawn in [0, 49999] for checks
  image:float32:-1,3,224,224     NCHW images; kept NCHW (no silent NHWC)
  hist:int64:-1,5                a fixed-length list per example
"""
from __future__ import annotations

from typing import List, Sequence

from tfx_bridge.artifacts import tensorspec
from tfx_bridge.artifacts.tensorspec import DTYPES, NAME_PATTERN, TensorSpec, make_inputs
from tfx_bridge.components.pytorch_model_importer.errors import ImporterConfigError

__all__ = ["DTYPES", "TensorSpec", "check_output_names", "make_inputs", "parse_input_spec",
           "parse_input_specs"]


def parse_input_spec(text: str) -> TensorSpec:
    """Parses ``name:dtype:shape[:lo..hi]``, naming what is wrong (ImporterConfigError)."""
    return tensorspec.parse_input_spec(text)


def parse_input_specs(texts: Sequence[str]) -> List[TensorSpec]:
    specs = tensorspec.parse_input_specs(texts)
    strings = [s.name for s in specs if s.dtype == "string"]
    if strings:
        raise ImporterConfigError(
            f"Model inputs {strings} are strings: a PyTorch model takes tensors. Map strings "
            "to ids in a Transform preprocessing_fn and import with its transform_graph.")
    return specs


def check_output_names(names: Sequence[str]) -> List[str]:
    names = list(names)
    if not names:
        raise ImporterConfigError(
            "Name every model output, in order, e.g. --output-name score --output-name experts.")
    bad = [n for n in names if not NAME_PATTERN.fullmatch(n)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if bad or dupes:
        raise ImporterConfigError(f"Output names must be unique identifiers; bad: {bad}, "
                                  f"repeated: {dupes}.")
    return names
