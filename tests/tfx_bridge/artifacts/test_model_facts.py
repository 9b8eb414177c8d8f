"""tfx_bridge.artifacts.model_facts: a Model folder's report read the same on every route."""
from __future__ import annotations

import json

import pytest

from tfx_bridge.artifacts.model_facts import ModelFacts, ModelFactsError, model_facts


def _report(tmp_path, body) -> str:
    (tmp_path / "report.json").write_text(body if isinstance(body, str) else json.dumps(body))
    return str(tmp_path)


def test_model_facts_optimizer_report_gives_gate_and_serving_needs(tmp_path):
    folder = _report(tmp_path, {"blessed": False, "requires_gpu": True,
                                "serving_flags": ["--xla_cpu_compilation_enabled=true"]})
    assert model_facts(folder) == ModelFacts(False, True,
                                             ("--xla_cpu_compilation_enabled=true",), None)


def test_model_facts_importer_report_gives_source_digest(tmp_path):
    folder = _report(tmp_path, {"blessed": True, "source_digest": "sha256:ab"})
    assert model_facts(folder) == ModelFacts(True, False, (), "sha256:ab")


def test_model_facts_representative_inputs_read_for_warmup(tmp_path):
    folder = _report(tmp_path, {"blessed": True,
                                "representative_inputs": ["images:uint8:-1,480,640,3"]})
    assert model_facts(folder).representative_inputs == ("images:uint8:-1,480,640,3",)


def test_model_facts_folder_without_report_has_no_gate(tmp_path):
    facts = model_facts(str(tmp_path))
    assert facts.blessed is None and facts.serving_flags == () and facts.source_digest is None


@pytest.mark.parametrize("body, match", [
    ({"blessed": 1}, r"blessed is 1, expected true or false"),
    ({"blessed": True, "serving_flags": "--x"}, r"serving_flags is '--x', expected a list"),
    ({"requires_gpu": "yes", "source_digest": 3},
     r"requires_gpu is 'yes'.*; source_digest is 3"),
    ("[1, 2]", r"holds a list, not an object"),
    ({"representative_inputs": "x:float32:-1,3"},
     r"representative_inputs is 'x:float32:-1,3', expected a list of strings"),
    ({"representative_inputs": ["x:float99:-1,3"]}, r"representative_inputs: .*float99"),
    ("{not json", r"is not JSON"),
])
def test_model_facts_report_of_wrong_shape_refused_naming_fields(tmp_path, body, match):
    with pytest.raises(ModelFactsError, match=match):
        model_facts(_report(tmp_path, body))
