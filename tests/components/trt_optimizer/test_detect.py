"""The TensorRT probe's answer is kept per process; a failed probe is asked again."""
from __future__ import annotations

from tfx_bridge import child
from tfx_bridge.components.trt_optimizer import detect

ANSWER = {"tensorrt": False, "gpus": 0, "linked": "8.6.1", "loaded": None,
          "reason": "libnvinfer 8.6.1 not found"}


def _counting_child(monkeypatch, results):
    calls = []

    def run_python(args, marker, timeout, env=None, warm=False):
        calls.append(args)
        return results[min(len(calls), len(results)) - 1]

    monkeypatch.setattr(detect, "_FOUND", None)
    monkeypatch.setattr(child, "run_python", run_python)
    return calls


def test_probe_answer_kept_for_the_process_one_child(monkeypatch):
    calls = _counting_child(monkeypatch, [child.ChildResult(0, ANSWER, "")])
    first, second = detect.probe(), detect.probe()
    assert first is second and len(calls) == 1
    assert first.why_not() == "libnvinfer 8.6.1 not found"


def test_probe_crash_not_kept_next_call_asks_again(monkeypatch):
    calls = _counting_child(monkeypatch, [child.ChildResult(-6, None, "Aborted"),
                                          child.ChildResult(0, ANSWER, "")])
    assert "the TensorRT probe died (exit -6): Aborted" in detect.probe().why_not()
    assert detect.probe().linked_version == "8.6.1" and len(calls) == 2
