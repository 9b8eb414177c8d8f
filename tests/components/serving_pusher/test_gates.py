"""gates: which verdicts stop a push, and what names the model for "nothing new"."""
from __future__ import annotations

from tfx_bridge.artifacts.model_facts import ModelFacts
from tfx_bridge.components.serving_pusher import gates

NO_REPORT = ModelFacts(None, False, (), None)
BLESSED = ModelFacts(True, False, (), None)


def test_blessings_model_without_report_or_mark_is_no_gate():
    assert gates.blessings(NO_REPORT) == {}


def test_blessings_mark_at_zero_fails_a_blessed_report():
    assert gates.blessings(BLESSED, mark=0) == {gates.MODEL_GATE: 0}
    assert gates.blessings(BLESSED, mark=1) == {gates.MODEL_GATE: 1}


def test_blessings_imported_model_without_verdict_fails_closed():
    found = gates.blessings(BLESSED, imported=NO_REPORT)
    assert found == {gates.MODEL_GATE: 1, gates.IMPORTER_GATE: 0}


def test_blessings_other_gates_not_supplied_are_left_out():
    found = gates.blessings(NO_REPORT, gates={gates.SCHEMA_GUARD_GATE: 1,
                                              gates.EVALUATOR_GATE: None,
                                              gates.INFRA_GATE: 0})
    assert found == {gates.SCHEMA_GUARD_GATE: 1, gates.INFRA_GATE: 0}


def test_identity_without_source_digest_is_none_so_bytes_decide():
    assert gates.identity(None, ["--flag"]) is None
    assert gates.identity(BLESSED, ["--flag"]) is None


def test_identity_names_source_and_flags():
    imported = ModelFacts(True, False, (), "ab12")
    assert gates.identity(imported, []) == "source:ab12 flags:"
    assert gates.identity(imported, ["--a", "--b"]) == "source:ab12 flags:--a --b"
