"""File names inside artifacts that more than one component reads (docs/ARCHITECTURE.md)."""
from tfx_bridge.artifacts.savedmodel import SERVING_DIR

__all__ = ["REPORT_JSON", "REPORT_MD", "SERVING_DIR", "SOURCE_SCHEMA_FILE"]

# Every component's machine-readable and human-readable report, at the artifact root.
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
# ParquetExampleGen's record of the Arrow types at the source, at the Examples root;
# SchemaGuard reads it to catch int32-at-source columns.
SOURCE_SCHEMA_FILE = "source_schema.json"
