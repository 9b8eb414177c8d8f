"""SchemaGuard's settings, declared once: defaults and checks in one frozen object
that the component, the executor and the CLI all build (stored as JSON in one
execution parameter). No TFX imports.

Example:
    >>> config = SchemaGuardConfig(exclude_splits=["eval"], batch_size=1024)
    >>> SchemaGuardConfig.from_json(config.to_json()) == config
    True
    >>> SchemaGuardConfig(batch_size=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.components.schema_guard.errors.SchemaGuardConfigError: SchemaGuard: ...
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

from tfx_bridge.artifacts import tfrecord
from tfx_bridge.components.schema_guard.errors import SchemaGuardConfigError
from tfx_bridge.components.schema_guard.expectations import GuardConfig
from tfx_bridge.components.schema_guard.findings import DEFAULT_BATCH_SIZE
from tfx_bridge.config import Config


@dataclasses.dataclass(frozen=True)
class SchemaGuardConfig(Config):
    """What SchemaGuard checks and how (docs/ARCHITECTURE.md, SchemaGuard)."""

    COMPONENT = "SchemaGuard"
    ERROR = SchemaGuardConfigError

    # A contract file (YAML, see schemas/), read at run time (local or a URI).
    contract_path: Optional[str] = None
    # Raise after recording, so nothing downstream runs.
    fail_on_anomalies: bool = True
    exclude_splits: Tuple[str, ...] = ()
    # Report features the schema lacks.
    check_unknown_features: bool = True
    batch_size: int = DEFAULT_BATCH_SIZE
    # A record whose header claims more is refused with its file and offset.
    max_record_bytes: int = tfrecord.DEFAULT_MAX_RECORD_BYTES

    def problems(self) -> List[str]:
        return [f"{name} must be a positive int, got {getattr(self, name)!r}"
                for name in ("batch_size", "max_record_bytes") if getattr(self, name) <= 0]

    def scan_config(self, expectations: Sequence, consumer: Sequence = ()) -> GuardConfig:
        """What one scan needs: the schema's expectations, the consumer's features and
        these settings."""
        return GuardConfig(tuple(expectations), tuple(consumer), batch_size=self.batch_size,
                           check_unknown_features=self.check_unknown_features,
                           max_record_bytes=self.max_record_bytes)
