"""The base of every component's one config: a frozen dataclass whose fields are
type-checked, whose own checks all run before one refusal, and which travels as
JSON in one execution parameter.

A component's ``config.py`` declares its fields with defaults (written once),
``COMPONENT`` (the name that opens every message), ``ERROR`` (its typed
``BridgeError``) and ``problems()`` (its range and consistency checks, each a
sentence with the fix). The component, the executor and the CLI all build that
one object; no TFX imports here or there.

Example:
    >>> import dataclasses
    >>> from tfx_bridge.errors import BridgeError
    >>> @dataclasses.dataclass(frozen=True)
    ... class Demo(Config):
    ...     COMPONENT = "Demo"
    ...     ERROR = BridgeError
    ...     records: int = 10
    ...     def problems(self):
    ...         return [] if self.records > 0 else [f"records must be > 0, got {self.records}"]
    >>> Demo.from_json(Demo(records=3).to_json())
    Demo(records=3)
    >>> Demo(records="3")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.errors.BridgeError: Demo: records must be an int, got '3' (str).
"""
from __future__ import annotations

import dataclasses
import json
import numbers
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, List, Tuple, Type

from tfx_bridge import limits
from tfx_bridge.errors import BridgeError

_NAMES = {bool: "a bool", int: "an int", float: "a number", str: "a string",
          dict: "a JSON object (dict)"}
_PLURALS = {bool: "bools", int: "ints", float: "numbers", str: "strings"}


def _kind_problem(name: str, value: Any, hint: Any) -> Tuple[Any, str]:
    """(the value normalized to ``hint``, '' or the sentence saying why it is not)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union:  # Optional[X]: None, or an X
        if value is None:
            return None, ""
        return _kind_problem(name, value, next(a for a in args if a is not type(None)))
    if typing.get_origin(hint) is tuple:  # Tuple[X, ...]: any iterable but a string/mapping
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
            return value, (f"{name} must be a list of {_PLURALS.get(args[0], 'values')}, "
                           f"got {value!r} ({type(value).__name__})")
        items = []
        for i, item in enumerate(value):
            item, why = _kind_problem(f"{name}[{i}]", item, args[0])
            if why:
                return value, why
            items.append(item)
        return tuple(items), ""
    if hint is dict:
        if not isinstance(value, dict):
            return value, f"{name} must be a JSON object (dict), got {type(value).__name__}"
        try:  # it travels as JSON: what comes back must be what was given
            same = json.loads(json.dumps(value)) == value
        except (TypeError, ValueError):
            same = False
        if not same:
            return value, (f"{name} must hold only JSON values (string keys; strings, "
                           f"numbers, bools, lists, objects), got {value!r:.200}")
        return value, ""
    # numbers.Integral / Real: numpy's ints and floats are numbers too; a bool is not an
    # int here, and only 0/1 stand for a bool (as the old int(bool(x)) parameters did).
    if hint is bool and isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value), ""
    if hint is int and isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value), ""
    if hint is float and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value), ""
    if hint in (int, float, bool) or not isinstance(value, hint):
        return value, (f"{name} must be {_NAMES.get(hint, hint.__name__)}, got {value!r} "
                       f"({type(value).__name__})")
    return value, ""


class Config:
    """Mixed into a frozen dataclass: typed fields, collected checks, JSON."""

    COMPONENT: ClassVar[str] = "tfx-bridge"
    ERROR: ClassVar[Type[BridgeError]] = BridgeError

    def problems(self) -> List[str]:
        """The component's own checks on well-typed fields; each says the fix."""
        return []

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        kinds = []
        for field in dataclasses.fields(self):
            value, why = _kind_problem(field.name, getattr(self, field.name),
                                       hints[field.name])
            if why:
                kinds.append(why)
            else:  # lists become tuples, ints given for floats floats: frozen and hashable
                object.__setattr__(self, field.name, value)
        # Range checks only make sense on well-typed fields.
        problems = kinds or self.problems()
        if problems:
            raise self.ERROR(f"{self.COMPONENT}: " + "; ".join(problems) + ".")

    @classmethod
    def defaults(cls) -> types.SimpleNamespace:
        """The declared defaults, by field name, without building a config: a config
        with required fields (a push's base path) has no default instance to read."""
        return types.SimpleNamespace(**{
            f.name: f.default for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING})

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str):
        try:
            fields = limits.loads_json(text, f"{cls.COMPONENT} config")
            if not isinstance(fields, dict):
                raise ValueError(f"a JSON object expected, got {type(fields).__name__}")
            return cls(**fields)
        except BridgeError:  # the config's own refusal (a BridgeError is a ValueError)
            raise
        except (TypeError, ValueError) as e:  # unknown keys, wrong shapes, not JSON
            raise cls.ERROR(f"{cls.COMPONENT} config {text[:200]!r}: {e}.") from e
