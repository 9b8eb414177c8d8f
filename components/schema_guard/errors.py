"""Typed errors of SchemaGuard."""
from tfx_bridge.errors import BridgeError, CheckFailed


class SchemaGuardError(BridgeError):
    """Base class of SchemaGuard's configuration and input errors."""


class SchemaGuardConfigError(SchemaGuardError):
    """Bad configuration: an unreadable schema or contract, an unknown dtype."""


class SchemaGuardInputError(SchemaGuardError):
    """Examples that cannot be read: no split folder, no records files, corrupt files."""


class AnomaliesFound(CheckFailed):
    """The data broke the schema or the consumer contract; findings listed one per line.

    Raised only when ``fail_on_anomalies`` is set, after the ExampleAnomalies
    artifact (blessed=0) and its reports are written.
    """
