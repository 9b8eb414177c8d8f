"""Float custom properties that read back from MLMD as the number recorded.

ml-metadata 1.16 writes an artifact's ``double_value`` into its SQL with six
decimal places: 5.96e-08 reads back as 0.0 and 1.2345678 as 1.234568 (checked
on SQLite). Every float the components record (an importer's max abs error, an
optimizer's latencies) therefore goes in as a JSON-value property: TFX stores
it as a ``google.protobuf.Struct`` whose number is an exact double, and
``Artifact.get_json_value_custom_property`` returns it.

Example:
  >>> from tfx.types import standard_artifacts
  >>> model = standard_artifacts.Model()
  >>> set_float(model, "max_abs_error", 5.960464477539063e-08)
  >>> get_float(model.mlmd_artifact, "max_abs_error")
  5.960464477539063e-08
"""
from __future__ import annotations

from typing import Optional

# Custom property names: the contracts between components (docs/ARCHITECTURE.md).
BLESSED = "blessed"  # int 1/0 on every gate's output; the pusher pushes only on all 1
MAX_ABS_ERROR = "max_abs_error"  # importer: float, exact
REWRITES = "rewrites"  # importer: comma-separated rewrite kinds applied
# importer: sha256 of what the SavedModel was made from (weights, spec, opset,
# tolerances, Transform graph); with the optimizer's serving flags it names the
# model for the pusher's "nothing new" check.
SOURCE_DIGEST = "source_digest"
BACKEND = "backend"  # optimizer: the backend that ran
PRECISION = "precision"
REQUIRES_GPU = "requires_gpu"  # optimizer: int 1/0
SERVING_FLAGS = "serving_flags"  # optimizer: space-separated TF Serving flags
LATENCY_BEFORE = "latency_p50_ms_before"  # optimizer: float, exact
LATENCY_AFTER = "latency_p50_ms_after"

# The key TFX keeps a single JSON value under inside the Struct.
_SINGLE_VALUE_KEY = "__value__"


def set_float(artifact, key: str, value: float) -> None:
    """Records ``value`` on a TFX artifact so MLMD keeps every digit."""
    artifact.set_json_value_custom_property(key, float(value))


def get_float(mlmd_artifact, key: str) -> Optional[float]:
    """The float recorded by set_float on an MLMD artifact proto; None if absent.

    Also reads a plain ``double_value`` (older runs), which MLMD rounded.
    """
    if key not in mlmd_artifact.custom_properties:
        return None
    value = mlmd_artifact.custom_properties[key]
    if value.HasField("struct_value"):
        fields = value.struct_value.fields
        return fields[_SINGLE_VALUE_KEY].number_value if _SINGLE_VALUE_KEY in fields else None
    if value.HasField("double_value"):
        return value.double_value
    return None
