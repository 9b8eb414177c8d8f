"""Consumer contracts: what a model or parser expects of each feature.

A contract comes from a model's ``serving_default`` signature (input names,
dtypes, shapes) or from a contract file for pipelines with no model yet::

    # schemas/demo.contract.yaml
    consumer: ctr-model
    features:
      item_id:    {dtype: int32, shape: []}        # consumed as int32 (parsed int64, cast)
      hist_items: {dtype: int32, shape: [-1]}      # a variable-length list
      price:      {dtype: float32, shape: []}
      country:    {dtype: string, shape: []}
      hour:       {dtype: int64, shape: [], parse_dtype: int64}

``dtype`` is the tensor the consumer uses; ``parse_dtype`` (optional) is the
dtype it asks ``tf.io.parse_example`` for, which must be one the wire carries.
``shape`` is per example (no batch dimension); -1 is a free dimension.
``required`` (default true) says the feature must be present in every record.

No TFX imports.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

from tfx_bridge.components.schema_guard.errors import SchemaGuardConfigError

WIRE_INT = "int64_list"
WIRE_FLOAT = "float_list"
WIRE_BYTES = "bytes_list"

# The dtypes tf.io.parse_example can produce: the three tf.Example wire kinds.
PARSEABLE = {"int64": WIRE_INT, "float32": WIRE_FLOAT, "string": WIRE_BYTES}

# Consumer dtype -> (wire kind it is made from, inclusive value range or None).
DTYPES: Dict[str, Tuple[str, Optional[Tuple[int, int]]]] = {
    "int8": (WIRE_INT, (-(2**7), 2**7 - 1)),
    "int16": (WIRE_INT, (-(2**15), 2**15 - 1)),
    "int32": (WIRE_INT, (-(2**31), 2**31 - 1)),
    "int64": (WIRE_INT, None),
    "uint8": (WIRE_INT, (0, 2**8 - 1)),
    "uint16": (WIRE_INT, (0, 2**16 - 1)),
    "uint32": (WIRE_INT, (0, 2**32 - 1)),
    "uint64": (WIRE_INT, (0, 2**63 - 1)),
    "bool": (WIRE_INT, (0, 1)),
    "float16": (WIRE_FLOAT, None),
    "bfloat16": (WIRE_FLOAT, None),
    "float32": (WIRE_FLOAT, None),
    "float64": (WIRE_FLOAT, None),
    "string": (WIRE_BYTES, None),
}

# Arrow source types (ParquetExampleGen's source_schema.json) -> value range.
ARROW_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1), "bool": (0, 1),
}

_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "str": "string",
            "bytes": "string", "int": "int64", "long": "int64"}


def normalize_dtype(dtype: str, where: str) -> str:
    name = str(dtype).strip().lower().replace("tf.", "")
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise SchemaGuardConfigError(
            f"{where}: unknown dtype {dtype!r}; use one of {sorted(DTYPES)}.")
    return name


@dataclasses.dataclass(frozen=True)
class ConsumerFeature:
    """One feature as a consumer reads it."""

    name: str
    dtype: str
    shape: Optional[Tuple[int, ...]] = None  # per example; None = not declared
    parse_dtype: Optional[str] = None
    required: bool = True
    origin: str = "contract"

    @property
    def wire(self) -> str:
        return DTYPES[self.dtype][0]

    @property
    def value_range(self) -> Optional[Tuple[int, int]]:
        return DTYPES[self.dtype][1]

    @property
    def value_count(self) -> Optional[int]:
        """Values per example the shape demands, when every dim is known."""
        if self.shape is None or any(d < 0 for d in self.shape):
            return None
        count = 1
        for d in self.shape:
            count *= d
        return count


@dataclasses.dataclass(frozen=True)
class Contract:
    """Every consumer feature, by name, and where the contract came from."""

    origin: str
    features: Tuple[ConsumerFeature, ...]

    def merged(self, other: Optional[Contract]) -> Contract:
        if other is None:
            return self
        return Contract(f"{self.origin} + {other.origin}", self.features + other.features)


# A contract is a few features: bounds that no real contract reaches, so a hostile file
# (a YAML alias bomb expands 462 bytes into gigabytes) is refused before it is built.
MAX_CONTRACT_BYTES = 1 << 20
MAX_CONTRACT_NODES = 100_000  # nodes after expanding every alias
MAX_CONTRACT_DEPTH = 20


def _check_yaml_bounds(text: str, path: str) -> None:
    """Refuses oversized, deeply nested YAML, or YAML whose aliases expand past
    MAX_CONTRACT_NODES, from its event stream (nothing is constructed)."""
    import yaml

    if len(text) > MAX_CONTRACT_BYTES:
        raise SchemaGuardConfigError(
            f"Contract file {path} is {len(text)} bytes; a contract is at most "
            f"{MAX_CONTRACT_BYTES} bytes. Give the consumer's features only.")
    sizes = {}  # anchor -> expanded node count
    stack = [[0, None]]  # [expanded size so far, anchor] per open collection
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([1, event.anchor])
            if len(stack) > MAX_CONTRACT_DEPTH + 1:
                raise SchemaGuardConfigError(
                    f"Contract file {path} nests deeper than {MAX_CONTRACT_DEPTH} levels; a "
                    "contract is 'features: {name: {dtype, shape}}'.")
            continue
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            size, anchor = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            size, anchor = 1, event.anchor
        elif isinstance(event, yaml.AliasEvent):
            size, anchor = sizes.get(event.anchor, 1), None
        else:
            continue
        if anchor:
            sizes[anchor] = size
        stack[-1][0] += size
        if stack[-1][0] > MAX_CONTRACT_NODES:
            raise SchemaGuardConfigError(
                f"Contract file {path} expands to more than {MAX_CONTRACT_NODES} YAML nodes "
                "through its aliases (*name); write the features out instead of nesting "
                "references to anchors.")


def load_contract_file(path: str) -> Contract:
    """Reads a YAML (or JSON) contract file; every problem is listed at once."""
    import tensorflow as tf
    import yaml

    from tfx_bridge.storage import fs

    try:
        with fs.open_file(path, "rb") as f:
            raw = f.read(MAX_CONTRACT_BYTES + 1)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SchemaGuardConfigError(
                f"Contract file {path} is not UTF-8 text ({e.reason} at byte {e.start}).") from e
        _check_yaml_bounds(text, path)
        doc = yaml.safe_load(text)
    except tf.errors.OpError as e:
        raise SchemaGuardConfigError(f"Cannot read contract file {path}: {e.message}.") from e
    except OSError as e:
        raise SchemaGuardConfigError(f"Cannot read contract file {path}: {e}.") from e
    except yaml.YAMLError as e:
        raise SchemaGuardConfigError(f"Contract file {path} is not valid YAML: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("features"), dict):
        raise SchemaGuardConfigError(
            f"Contract file {path}: expected a mapping with 'features: {{name: {{dtype, "
            "shape}}}}'.")
    origin = f"contract {path.rstrip('/').rsplit('/', 1)[-1]}"
    features, problems = [], []
    for name, spec in doc["features"].items():
        where = f"{path}: feature {name!r}"
        if not isinstance(spec, dict) or "dtype" not in spec:
            problems.append(f"{where}: needs at least 'dtype' (e.g. {{dtype: int32, shape: []}}).")
            continue
        unknown = set(spec) - {"dtype", "shape", "parse_dtype", "required"}
        if unknown:
            problems.append(f"{where}: unknown keys {sorted(unknown)}; allowed: dtype, shape, "
                            "parse_dtype, required.")
        try:
            dtype = normalize_dtype(spec["dtype"], where)
            parse = spec.get("parse_dtype")
            # parse_dtype is checked against the wire later, so keep what was asked.
            parse = None if parse is None else normalize_dtype(parse, where)
        except SchemaGuardConfigError as e:
            problems.append(str(e))
            continue
        shape = spec.get("shape")
        if shape is not None:
            if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
                problems.append(f"{where}: shape must be a list of ints (-1 free), got {shape!r}.")
                continue
            shape = tuple(shape)
        features.append(ConsumerFeature(str(name), dtype, shape, parse,
                                         bool(spec.get("required", True)), origin))
    if problems:
        raise SchemaGuardConfigError("\n".join(problems))
    return Contract(origin, tuple(features))


def contract_from_saved_model(path: str, signature: str = "serving_default") -> Contract:
    """The serving signature's inputs as a contract (reads saved_model.pb only).

    Inputs are matched to features by name. A signature whose only input is a
    serialized tf.Example (DT_STRING) names no features, so it yields none.
    """
    from tfx_bridge.artifacts.savedmodel import signature_specs
    from tfx_bridge.storage import fs

    if not fs.exists(fs.join(path, "saved_model.pb")) and fs.exists(
            fs.join(path, "Format-Serving", "saved_model.pb")):
        path = fs.join(path, "Format-Serving")
    inputs = signature_specs(path, signature)["inputs"]
    origin = f"model {signature}"
    features = []
    for name, info in sorted(inputs.items()):
        if info["dtype"] not in DTYPES:
            continue  # resources, variants: not features
        shape = None
        if info["shape"] is not None:
            shape = tuple(-1 if d is None else d for d in info["shape"][1:])  # no batch dim
        features.append(ConsumerFeature(name, info["dtype"], shape, None, True, origin))
    if len(features) == 1 and features[0].dtype == "string" and features[0].shape == ():
        return Contract(origin, ())  # serialized tf.Example input: no per-feature contract
    return Contract(origin, tuple(features))
