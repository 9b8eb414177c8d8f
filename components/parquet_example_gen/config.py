"""ParquetExampleGen's own settings, declared once: defaults and checks in one
frozen object that the component, the executor and the CLI all build (stored as
JSON in one execution parameter). No TFX imports.

The split and span settings stay TFX's own protos (``input_base``,
``input_config``, ``output_config``, ``range_config``): the stock
FileBasedExampleGen driver resolves spans and fingerprints from them.

Example:
    >>> config = ParquetConfig(columns=["user_id", "clicked"], batch_size=4096)
    >>> ParquetConfig.from_json(config.to_json()) == config
    True
    >>> ParquetConfig(columns=["a", "a"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.components.parquet_example_gen.errors.ParquetConfigError: ParquetExampleGen: ...
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

from tfx_bridge.components.parquet_example_gen.arrow_types import DEFAULT_BATCH_SIZE
from tfx_bridge.components.parquet_example_gen.errors import ParquetConfigError
from tfx_bridge.config import Config

DEFAULT_PATTERN = "*.parquet"  # the default input split's file pattern
# The CLI's output splits by default, as TFX ExampleGen splits: hash buckets 2 to 1.
DEFAULT_SPLITS = "train:2,eval:1"


@dataclasses.dataclass(frozen=True)
class ParquetConfig(Config):
    """Which columns are read, how many rows per Arrow batch, and whether a split
    may come out empty (refused by default: Transform, the trainer and the
    Evaluator cannot work on a split with no records)."""

    COMPONENT = "ParquetExampleGen"
    ERROR = ParquetConfigError

    columns: Optional[Tuple[str, ...]] = None  # None: every column
    batch_size: int = DEFAULT_BATCH_SIZE
    allow_empty_splits: bool = False

    def problems(self) -> List[str]:
        problems = []
        if self.columns is not None:
            if not self.columns or not all(self.columns):
                problems.append(f"columns must be non-empty names, got {list(self.columns)!r}")
            elif len(set(self.columns)) != len(self.columns):
                problems.append(f"columns has duplicates: {list(self.columns)!r}")
        if self.batch_size <= 0:
            problems.append(f"batch_size must be a positive int, got {self.batch_size!r}")
        return problems

    def partition_problems(self, partition_feature: Optional[str]) -> List[str]:
        """A hash-partition feature must be read to be hashed."""
        if partition_feature and self.columns is not None \
                and partition_feature not in self.columns:
            return [f"partition_feature_name {partition_feature!r} is not among columns "
                    f"{list(self.columns)!r}; add it"]
        return []
