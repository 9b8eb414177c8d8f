"""What a Model artifact folder says about itself, read the same way on every route.

The importer and the optimizer write ``report.json`` at the root of the folder
they produce (component or CLI alike); their executors only mirror it into
MLMD properties. ServingPusher reads the folder through :func:`model_facts`,
from its executor and from ``tfx-bridge push``, so a gate or a serving need
cannot be honoured on one route and missed on the other. No TFX imports; the
folder may be a URI.

Example:
    >>> import json, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> fs.write_text(fs.join(folder, "report.json"), json.dumps({"blessed": True}))
    >>> model_facts(folder).blessed
    True
    >>> model_facts(tempfile.mkdtemp()).blessed is None  # no report: no gate of its own
    True
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from tfx_bridge import limits
from tfx_bridge.artifacts import tensorspec
from tfx_bridge.artifacts.layout import REPORT_JSON
from tfx_bridge.errors import BridgeError
from tfx_bridge.storage import fs

# report.json larger than this is not one of ours (ours are a few kB to a few hundred).
MAX_REPORT_BYTES = 16 * 1024 * 1024


class ModelFactsError(BridgeError):
    """A model folder's report.json that is not readable as one of ours."""


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """``blessed`` None: the folder has no report (a stock Trainer's model), no gate."""

    blessed: Optional[bool]
    requires_gpu: bool
    serving_flags: Tuple[str, ...]
    source_digest: Optional[str]
    # Input specs (name:dtype:shape) with every dimension but the batch concrete, for
    # inputs whose signature leaves sizes open (a detector's images): what warmup
    # requests and timings use instead of placeholder sizes.
    representative_inputs: Tuple[str, ...] = ()


def model_facts(model_dir: str) -> ModelFacts:
    """The blessing, serving needs and source digest of the Model artifact folder
    ``model_dir`` (from its report.json), refusing a report of the wrong shape."""
    path = fs.join(model_dir, REPORT_JSON)
    if not fs.exists(path):
        return ModelFacts(None, False, (), None, ())
    report = limits.read_json(path, ModelFactsError,
                              "Give the importer's or optimizer's output folder, or remove "
                              "the file.", MAX_REPORT_BYTES)
    problems = []
    if not isinstance(report, dict):
        raise ModelFactsError(f"{path} holds a {type(report).__name__}, not an object.")
    blessed = report.get("blessed")
    if blessed is not None and not isinstance(blessed, bool):
        problems.append(f"blessed is {blessed!r}, expected true or false")
    gpu = report.get("requires_gpu", False)
    if not isinstance(gpu, bool):
        problems.append(f"requires_gpu is {gpu!r}, expected true or false")
    flags = report.get("serving_flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        problems.append(f"serving_flags is {flags!r}, expected a list of strings")
    digest = report.get("source_digest")
    if digest is not None and not isinstance(digest, str):
        problems.append(f"source_digest is {digest!r}, expected a string")
    shapes = report.get("representative_inputs") or []
    if not isinstance(shapes, list) or not all(isinstance(s, str) for s in shapes):
        problems.append(f"representative_inputs is {shapes!r}, expected a list of strings")
    else:
        for text in shapes:
            try:
                tensorspec.parse_input_spec(text)
            except BridgeError as e:
                problems.append(f"representative_inputs: {str(e).rstrip('.')}")
    if problems:
        raise ModelFactsError(f"{path}: " + "; ".join(problems) + ". Re-run the importer or "
                              "optimizer that wrote it.")
    return ModelFacts(blessed, gpu, tuple(flags), digest, tuple(shapes))
