"""Declared model inputs: ``name:dtype:shape[:lo..hi]`` specs, and check inputs drawn from them.

Shared by the importer (declared signatures), the optimizer and the pusher
(inputs for drift checks, timing and warmup). No TFX, torch or TF imports: the
CLI parses specs before loading anything heavy. Functions that refuse input
raise :class:`TensorSpecError`.

  user_id:int64:-1:0..49999      a batch of ids, values drawn in [0, 49999] for checks
  image:float32:-1,3,224,224     NCHW images; kept NCHW (no silent NHWC)
  hist:int64:-1,5                a fixed-length list per example
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfx_bridge import limits
from tfx_bridge.errors import BridgeError


class TensorSpecError(BridgeError):
    """An input spec that does not parse (``name:dtype:shape[:lo..hi]``)."""

DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "string")
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
# Default value ranges for random check inputs when none is declared.
DEFAULT_INT_RANGE = (0, 9)
DEFAULT_FLOAT_RANGE = (-1.0, 1.0)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One declared input: name, dtype, shape (-1 = dynamic), value range for checks."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    value_range: Optional[Tuple[float, float]] = None

    @property
    def is_integer(self) -> bool:
        return self.dtype.startswith(("int", "uint")) or self.dtype == "bool"

    @property
    def draw_range(self) -> Tuple[float, float]:
        if self.value_range is not None:
            return self.value_range
        if self.dtype == "bool":
            return (0, 1)
        return DEFAULT_INT_RANGE if self.is_integer else DEFAULT_FLOAT_RANGE

    def concrete_shape(self, batch: int, free: int = 4) -> Tuple[int, ...]:
        """The shape with the leading -1 as ``batch`` and other -1s as ``free``."""
        dims = []
        for i, d in enumerate(self.shape):
            dims.append(d if d >= 0 else (batch if i == 0 else free))
        return tuple(dims)

    def to_text(self) -> str:
        text = f"{self.name}:{self.dtype}:{','.join(str(d) for d in self.shape)}"
        if self.value_range is not None:
            lo, hi = self.value_range
            text += f":{_num(lo)}..{_num(hi)}"
        return text


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def parse_input_spec(text: str) -> TensorSpec:
    """Parses ``name:dtype:shape[:lo..hi]``, naming what is wrong."""
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise TensorSpecError(
            f"Input spec {text!r}: expected name:dtype:shape[:lo..hi], e.g. "
            "'user_id:int64:-1:0..49999' or 'image:float32:-1,3,224,224'.")
    name, dtype, shape_text = parts[:3]
    if not NAME_PATTERN.fullmatch(name):
        raise TensorSpecError(f"Input spec {text!r}: bad name {name!r}.")
    if dtype not in DTYPES:
        raise TensorSpecError(
            f"Input spec {text!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}.")
    try:
        shape = tuple(int(d) for d in shape_text.split(",")) if shape_text else ()
    except ValueError as e:
        raise TensorSpecError(
            f"Input spec {text!r}: shape {shape_text!r} must be comma-separated ints "
            "(-1 for a dynamic dimension).") from e
    if any(d < -1 or d == 0 for d in shape):
        raise TensorSpecError(f"Input spec {text!r}: dimensions must be positive or -1.")
    if not shape or shape[0] != -1:
        raise TensorSpecError(
            f"Input spec {text!r}: the first dimension is the batch and must be -1 "
            "(e.g. -1 or -1,3,224,224).")
    # Python ints: a declared shape never overflows before it is compared.
    limits.check_elements(math.prod(d if d > 0 else 1 for d in shape[1:]),
                          f"Input spec {text!r}: one row")
    value_range = None
    if len(parts) == 4:
        m = re.fullmatch(r"(-?[0-9.e+-]+)\.\.(-?[0-9.e+-]+)", parts[3])
        if not m:
            raise TensorSpecError(
                f"Input spec {text!r}: range {parts[3]!r} must look like 0..999 or -1.5..1.5.")
        lo, hi = float(m.group(1)), float(m.group(2))
        if lo > hi:
            raise TensorSpecError(f"Input spec {text!r}: range low {lo} > high {hi}.")
        value_range = (lo, hi)
    return TensorSpec(name, dtype, shape, value_range)


def parse_input_specs(texts: Sequence[str]
                      ) -> List[TensorSpec]:
    if not texts:
        raise TensorSpecError(
            "Declare at least one input, e.g. --input user_id:int64:-1:0..49999.")
    specs = [parse_input_spec(t) for t in texts]
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise TensorSpecError(f"Input names must be unique; repeated: {dupes}.")
    return specs


def make_inputs(inputs: Sequence[TensorSpec], batch: int, seed: int = 0, free: int = 4
                ) -> Dict[str, np.ndarray]:
    """Random inputs within each spec's dtype and value range.

    The batch dimension is ``batch``, every other dynamic dimension ``free``.
    """
    rng = np.random.default_rng([seed, batch, free])
    out = {}
    for spec in inputs:
        shape = spec.concrete_shape(batch, free)
        limits.check_elements(math.prod(shape), f"Input {spec.name!r} at batch {batch} "
                              f"(shape {list(shape)})")
        lo, hi = spec.draw_range
        if spec.dtype == "string":  # a raw string feature served through a vocabulary
            out[spec.name] = np.array(
                [f"v{i}".encode() for i in rng.integers(0, 10, int(np.prod(shape)))],
                dtype=object).reshape(shape)
        elif spec.dtype == "bool":
            out[spec.name] = rng.integers(0, 2, shape).astype(bool)
        elif spec.is_integer:
            out[spec.name] = rng.integers(int(lo), int(hi) + 1, shape).astype(spec.dtype)
        else:
            out[spec.name] = rng.uniform(lo, hi, shape).astype(spec.dtype)
    return out
