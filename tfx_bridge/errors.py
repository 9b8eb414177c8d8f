"""The root of every error tfx-bridge raises on purpose.

Each component has its own typed subclasses (e.g.
``tfx_bridge.components.parquet_example_gen.errors``). The CLI turns any
``BridgeError`` into one message on stderr and exit code 2 (bad input or
configuration); a failed check on a model or data set is a recorded result
with exit code 1, not an exception.
"""


class BridgeError(ValueError):
    """Bad input or configuration. Retrying without a change will not help."""
