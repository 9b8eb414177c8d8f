"""The span rule, as TFX's ExampleGen driver applies it, checked before a run.

The driver globs the input pattern with ``{SPAN}`` as ``*``, reads the span of
every matching file with a regex, ``int()``s it, and ingests the files of the
first highest span it met. So a folder the glob matches but ``int()`` cannot
read (``span-2.bak/``) fails the run minutes in; ``span-1_0`` is span 10
(``int`` reads underscores); ``span-01`` and ``span-1`` are one span, of which
the driver takes whichever the listing gave first; and a span past int64
cannot be stored in MLMD. :func:`latest_span` applies the same glob and the
same ``int()``, and refuses every such folder by name, so the span the
pre-check looks at is the span TFX ingests. No TFX imports.
"""
from __future__ import annotations

import re
from typing import Dict, List, NamedTuple

from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs

SPAN_SPEC = "{SPAN}"
MAX_SPAN = 2**63 - 1  # MLMD stores the span as int64


class SpanError(BridgeError):
    """Span folders the pre-check and TFX's driver would read differently."""


class Span(NamedTuple):
    number: int
    folder: str  # the folder (relative to the root) whose name carries the span
    files: List[str]


def _regex(pattern: str) -> re.Pattern:
    """TFX's glob-to-regex (example_gen.utils._glob_to_regex), {SPAN} captured."""
    head, _, tail = pattern.partition(SPAN_SPEC)

    def glob_regex(text: str) -> str:
        out = text.replace("\\", "\\\\").replace(".", r"\.").replace("+", r"\+")
        out = out.replace("*", r"[^\\/]*").replace("?", r"[^\\/]")
        return out.replace("(", r"\(").replace(")", r"\)")

    return re.compile(glob_regex(head) + r"(?P<span>.*)" + glob_regex(tail))


def spans(root: str, pattern: str) -> Dict[int, Span]:
    """Every span under ``root`` as the driver reads ``pattern`` (one ``{SPAN}``);
    refuses tokens ``int()`` cannot read, non-canonical spellings (zero padding,
    underscores, signs, spaces), negative spans and spans past int64.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> for name in ("span-1", "span-12"):
    ...     fs.write_text(fs.join(root, name, "a.parquet"), "")
    >>> sorted(spans(root, "span-{SPAN}/*.parquet"))
    [1, 12]
    >>> fs.write_text(fs.join(root, "span-012", "a.parquet"), "")
    >>> spans(root, "span-{SPAN}/*.parquet")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfx_bridge.pipelines.spans.SpanError: ...span-012: span '012' is read by TFX as span 12; ...
    """
    if pattern.count(SPAN_SPEC) != 1:
        raise SpanError(f"input pattern {pattern!r} must hold {SPAN_SPEC} once.")
    regex = _regex(pattern)
    root = root.rstrip("/")
    found: Dict[int, Span] = {}
    for path in sorted(fs.glob(fs.join(root, pattern.replace(SPAN_SPEC, "*")))):
        rel = path[len(root):].lstrip("/")
        match = regex.fullmatch(rel)
        if match is None:
            continue
        token = match.group("span")
        folder = rel[:match.end("span")]
        where = fs.join(root, folder)
        try:
            number = int(token)
        except ValueError:
            raise SpanError(
                f"{where} matches the input pattern {pattern!r} but {token!r} is no span "
                "number: TFX's ExampleGen would fail on it. Move it out of the data root, "
                "or rename it span-<number>.") from None
        if str(number) != token or number < 0 or number > MAX_SPAN:
            why = ("past the largest span MLMD stores (2**63 - 1)" if number > MAX_SPAN
                   else "negative" if number < 0 else f"read by TFX as span {number}")
            raise SpanError(
                f"{where}: span {token!r} is {why}; spans are written as plain decimal "
                f"numbers (span-{max(0, min(number, MAX_SPAN))}), so each span has one folder "
                "and the pre-check and TFX read the same one. Rename or move it.")
        span = found.setdefault(number, Span(number, folder, []))
        span.files.append(rel)
    return found


def latest_span(root: str, pattern: str) -> Span:
    """The span TFX's driver will ingest (the highest); SpanError when there is none."""
    found = spans(root, pattern)
    if not found:
        raise SpanError(f"{root} holds no file matching {pattern!r}.")
    return found[max(found)]
