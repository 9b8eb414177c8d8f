"""Schemas and consumer contracts shipped with tfx-bridge (the demo dataset's).

``demo.schema.pbtxt``   TFMD Schema of the demo click-through data (for ImportSchemaGen).
``demo.contract.yaml``  what the demo model consumes (for SchemaGuard's contract_path).
"""
import os

DEMO_SCHEMA = "demo.schema.pbtxt"
DEMO_CONTRACT = "demo.contract.yaml"


def path(name: str) -> str:
    """Absolute path of a file in this folder (works for editable and wheel installs)."""
    full = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    if not os.path.exists(full):
        raise FileNotFoundError(f"No {name!r} in tfx_bridge.schemas ({os.path.dirname(full)}).")
    return full
