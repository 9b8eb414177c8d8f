"""What may stop a push, and what names the model for the "nothing new" check.

Both routes (the executor and ``tfx-bridge push``) read the Model folders
through :func:`tfx_bridge.artifacts.model_facts.model_facts` and hand the
verdicts of any other gate in; these functions turn them into the blessings a
push is gated on and the identity it is compared by, so the two routes decide
alike. No TFX imports.

Example:
    >>> from tfx_bridge.artifacts.model_facts import ModelFacts
    >>> facts = ModelFacts(blessed=True, requires_gpu=False, serving_flags=(),
    ...                    source_digest=None)
    >>> blessings(facts, mark=0)  # a blessed report, but the artifact says 0
    {'the model (optimizer drift / importer equivalence)': 0}
    >>> imported = ModelFacts(True, False, (), "ab12")
    >>> identity(imported, ["--flag"])
    'source:ab12 flags:--flag'
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

from tfx_bridge.artifacts.model_facts import ModelFacts

# The gate the pushed Model folder's own report.json holds (optimizer drift check or
# importer equivalence), named in push reasons on both routes.
MODEL_GATE = "the model (optimizer drift / importer equivalence)"
IMPORTER_GATE = "the importer (equivalence)"
SCHEMA_GUARD_GATE = "SchemaGuard"
EVALUATOR_GATE = "Evaluator (ModelBlessing)"
INFRA_GATE = "InfraValidator (InfraBlessing)"


def folder_verdict(facts: ModelFacts, mark: Optional[int], required: bool) -> Optional[int]:
    """A Model folder's verdict: its report's ``blessed`` and ``mark`` (a ``blessed``
    property something else set on the artifact), either at 0 failing it; None (no
    gate) when there is neither, or 0 then when ``required`` (supplied to gate the
    push: no verdict at all fails closed)."""
    verdicts = [] if facts.blessed is None else [int(facts.blessed)]
    if mark is not None:
        verdicts.append(int(mark))
    if not verdicts:
        return 0 if required else None
    return min(verdicts)


def blessings(facts: ModelFacts, mark: Optional[int] = None,
              imported: Optional[ModelFacts] = None, imported_mark: Optional[int] = None,
              gates: Optional[Mapping[str, Optional[int]]] = None) -> Dict[str, int]:
    """Every gate the push was given, by name -> ``blessed`` (1 or 0): the model's,
    the imported model's when one was supplied, and ``gates`` (other components'
    verdicts; None: not supplied)."""
    found = {MODEL_GATE: folder_verdict(facts, mark, required=False),
             IMPORTER_GATE: (folder_verdict(imported, imported_mark, required=True)
                             if imported is not None else None),
             **(gates or {})}
    return {k: int(v) for k, v in found.items() if v is not None}


def identity(imported: Optional[ModelFacts], serving_flags: Sequence[str]) -> Optional[str]:
    """What names the model for the "nothing new" check: the importer's source digest
    with the serving flags when an imported model with one was given, else None (the
    SavedModel's bytes decide). Two optimizer runs over the same sources may keep
    different (drift-checked, equivalent) candidates; only what the server must be
    told changes the model."""
    source = imported.source_digest if imported is not None else None
    if not source:
        return None
    return f"source:{source} flags:{' '.join(serving_flags)}"
