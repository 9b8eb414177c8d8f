"""ONNX's own backend node tests (shipped in the onnx wheel) run through a converter.

No TFX imports. Each case is a folder ``onnx/backend/test/data/node/<case>/``
holding ``model.onnx`` and ``test_data_set_*/{input,output}_<i>.pb``.
:func:`run_case` converts the model, runs the converted function on the
case's inputs and compares with the expected outputs at ONNX's backend
tolerances (``rtol=1e-3``, ``atol=1e-7``, onnx/backend/test/runner).

This in-process form is for development. :func:`run_fresh` is the honest
route the benchmark (``onnx_conformance.py``) takes: worker children
convert and save SavedModels (ours, or plain onnx2tf for comparison), then a
fresh child with oneDNN off (``TF_ENABLE_ONEDNN_OPTS=0``) loads each one and
runs ``serving_default`` on the case's inputs.

Size: the case runner, its worker children and the report they feed are one
protocol (case lists, timeouts, per-case verdicts); kept together so the
benchmark's columns cannot drift apart.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import io
import json
import os
import re
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

RTOL = 1e-3
ATOL = 1e-7
PASS, REFUSED, FAIL, MISMATCH = "pass", "refused", "fail", "mismatch"


def node_test_root() -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


def list_cases(prefix: str = "") -> List[str]:
    root = node_test_root()
    return sorted(d for d in os.listdir(root)
                  if d.startswith("test_" + prefix) and os.path.isdir(os.path.join(root, d)))


def _read_tensor(path: str):
    """A TensorProto file as numpy; None for sequences/optionals (not plain tensors)."""
    import onnx
    from onnx import numpy_helper
    data = open(path, "rb").read()
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    if tensor.data_type == 0:  # not a TensorProto: a SequenceProto or OptionalProto
        return None
    try:
        array = numpy_helper.to_array(tensor)
    except ValueError:  # a SequenceProto that parsed as a TensorProto by accident
        return None
    from tfx_bridge.onnx_tf import dtypes
    elem = tensor.data_type
    if elem == onnx.TensorProto.UINT16 and _declared_type(path) == onnx.TensorProto.BFLOAT16:
        import ml_dtypes  # ONNX's bfloat16 cases store the bit patterns as uint16
        return array.view(ml_dtypes.bfloat16)
    # bfloat16/float8/4-bit values (float32 from to_array) in the converter's carrier dtype
    return dtypes.as_carrier(array, elem) if elem in dtypes.NARROW_TYPES else array


def _declared_type(path: str) -> Optional[int]:
    """The element type the case's model declares for the input/output file ``path``."""
    match = re.match(r"(input|output)_(\d+)\.pb$", os.path.basename(path))
    if not match:
        return None
    kind, index = match.group(1), int(match.group(2))
    graph = _case_graph(os.path.join(os.path.dirname(os.path.dirname(path)), "model.onnx"))
    inits = {t.name for t in graph.initializer}
    values = [v for v in graph.input if v.name not in inits] if kind == "input" \
        else list(graph.output)
    return values[index].type.tensor_type.elem_type if index < len(values) else None


@functools.lru_cache(maxsize=8)
def _case_graph(model_path: str):
    import onnx
    return onnx.load(model_path).graph


@dataclasses.dataclass
class Case:
    name: str
    model_path: str
    inputs: List[Optional[np.ndarray]]
    outputs: List[Optional[np.ndarray]]


def load_case(name: str, data_set: int = 0) -> Case:
    folder = os.path.join(node_test_root(), name)
    data = os.path.join(folder, f"test_data_set_{data_set}")

    def tensors(kind: str):
        files = sorted(glob.glob(os.path.join(data, f"{kind}_*.pb")),
                       key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))
        return [_read_tensor(p) for p in files]

    return Case(name, os.path.join(folder, "model.onnx"), tensors("input"), tensors("output"))


@dataclasses.dataclass
class CaseResult:
    name: str
    ops: List[str]
    status: str
    detail: str = ""


def compare_outputs(expected, got) -> Optional[str]:
    """None when ``got`` matches ``expected`` at ONNX's tolerances, else what differs."""
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        e, g = np.asarray(e), np.asarray(g)
        if e.shape != g.shape:
            return f"output {i}: shape {list(g.shape)}, expected {list(e.shape)}"
        if e.dtype != g.dtype:
            return f"output {i}: dtype {g.dtype}, expected {e.dtype}"
        if e.dtype.kind == "V" and e.dtype.name.startswith(("bfloat16", "float8")):
            e, g = e.astype(np.float32), g.astype(np.float32)  # exact: every value fits
        if e.dtype.kind in "biuU" or e.dtype == object:
            if not np.array_equal(e, g):
                return f"output {i}: {int(np.sum(e != g))} values differ"
            continue
        try:
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL, equal_nan=True)
        except AssertionError:
            diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
            return f"output {i}: max abs diff {np.nanmax(diff):.3g}"
    return None


def case_ops(model) -> List[str]:
    from tfx_bridge.onnx_tf.check import iter_nodes
    return sorted({n.op_type for n in iter_nodes(model.graph)})


def run_case(name: str) -> CaseResult:
    """Converts and runs one case in this process."""
    import onnx
    import tensorflow as tf

    from tfx_bridge.onnx_tf import check, core

    case = load_case(name)
    model = onnx.load(case.model_path)
    ops = case_ops(model)
    problem = _data_problem(case)
    if problem:  # the converter's own refusal (naming the op) first, where it has one
        from tfx_bridge.onnx_tf import ops as _ops  # noqa: F401
        problems = check.check_model(model)
        return CaseResult(name, ops, REFUSED,
                          str(core.ConversionFailed(problems)) if problems else problem)
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001  (inference is an aid)
        pass
    try:
        converted = core.convert(model)
    except core.ConversionFailed as e:
        return CaseResult(name, ops, REFUSED, str(e))
    except Exception as e:  # noqa: BLE001  (a converter crash is a finding, not a stop)
        return CaseResult(name, ops, FAIL, f"convert: {type(e).__name__}: {e}"[:500])
    graph_inputs = [i.name for i in model.graph.input
                    if i.name not in {t.name for t in model.graph.initializer}]
    feeds = [tf.constant(v) for _, v in zip(graph_inputs, case.inputs, strict=False)]
    try:
        out = converted.serve(*feeds)
        got = [out[n].numpy() for n in converted.output_names]
    except Exception as e:  # noqa: BLE001
        return CaseResult(name, ops, FAIL, f"run: {type(e).__name__}: {e}"[:500])
    problem = compare_outputs(case.outputs, got)
    return CaseResult(name, ops, MISMATCH if problem else PASS, problem or "")


#
# The honest check: SavedModels are written by worker children (many cases each, to
# amortise TF's start-up), then loaded in a separate fresh child with oneDNN off and run
# through ``serving_default`` on the case's inputs. Each worker logs a "start" line before
# a case and its result after, so a child that crashes or hangs loses only that case: the
# parent kills it, reruns that case alone (a second crash marks it ``crash``) and resumes
# the rest of the chunk in a new child.

CRASH = "crash"
CONVERTED = "converted"
WORKER_KINDS = ("convert", "onnx2tf", "check")
TIMEOUT_S = {"convert": 120.0, "onnx2tf": 240.0, "check": 60.0}
# A worker aborts (as a segfaulting kernel would) on this case: exercises the crash path.
CRASH_ON_ENV = "TFX_BRIDGE_CONFORMANCE_CRASH_ON"
RANDOM_OPS = frozenset({"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike",
                        "RandomUniform", "RandomUniformLike"})


def _log(stream, **record) -> None:
    stream.write(json.dumps(record) + "\n")
    stream.flush()


def _data_problem(case: Case) -> Optional[str]:
    if any(v is None for v in case.inputs + case.outputs):
        return "sequence or optional inputs/outputs (plain tensors only)"
    if any(v.dtype.kind in "OSU" for v in case.inputs + case.outputs):
        return "string inputs/outputs (numeric and bool tensors only)"
    return None


def _convert_ours(name: str, out_dir: str) -> dict:
    from tfx_bridge.onnx_tf import check, core

    case = load_case(name)
    model = core.load_for_conversion(case.model_path)
    problem = _data_problem(case)
    if problem:  # the converter's own refusal (naming the op) first, where it has one
        problems = check.check_model(model)
        return {"status": REFUSED,
                "detail": str(core.ConversionFailed(problems)) if problems else problem}
    try:
        converted = core.convert(model)
    except core.ConversionFailed as e:
        return {"status": REFUSED, "detail": str(e)}
    core.save(converted, out_dir)
    inputs = [converted.input_names[n] for n in converted.input_names]
    return {"status": CONVERTED, "inputs": inputs, "outputs": list(converted.output_names)}


def _convert_onnx2tf(name: str, out_dir: str) -> dict:
    """Plain onnx2tf 1.24.1 as the importer calls it (its onnx2tf runner), on a private copy."""
    import shutil

    import onnx
    import onnx2tf

    case = load_case(name)
    problem = _data_problem(case)
    if problem:
        return {"status": REFUSED, "detail": problem}
    os.makedirs(out_dir, exist_ok=True)
    private = os.path.join(os.path.dirname(out_dir), os.path.basename(out_dir) + ".onnx")
    shutil.copyfile(case.model_path, private)  # onnx2tf rewrites its input in place
    graph = onnx.load(case.model_path).graph
    inits = {t.name for t in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in inits]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            model = onnx2tf.convert(input_onnx_file_path=private, output_folder_path=out_dir,
                                    keep_shape_absolutely_input_names=inputs or None,
                                    non_verbose=True, disable_model_save=True)
    except SystemExit as e:  # onnx2tf exits on the errors it detects, after printing them
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip()
                 for ln in printed.getvalue().splitlines() if ln.strip()]
        # A traceback's exception line, else onnx2tf's first ERROR line (later ones are
        # generic hints).
        said = next((ln for ln in reversed(lines) if re.match(r"\w+(Error|Exception): ", ln)),
                    next((ln for ln in lines if "ERROR" in ln), lines[-1] if lines else ""))
        return {"status": FAIL, "detail": f"onnx2tf exited ({e.code}): {said}"[:500]}
    if model is None:
        return {"status": FAIL, "detail": "onnx2tf returned no model"}
    from tfx_bridge.components.pytorch_model_importer.onnx2tf.runner import save_keras_model

    save_keras_model(model, out_dir)
    n_out = len(graph.output)
    return {"status": CONVERTED, "inputs": [t.name for t in model.inputs],
            "outputs": [f"output_{i}" for i in range(n_out)]}


def _check_saved(name: str, out_dir: str) -> dict:
    """Loads the SavedModel in this (oneDNN-off) process and compares with the case."""
    import tensorflow as tf

    with open(os.path.join(out_dir, "case.json")) as f:
        names = json.load(f)
    case = load_case(name)
    fn = tf.saved_model.load(out_dir).signatures["serving_default"]
    feeds = {arg: tf.constant(v) for arg, v in zip(names["inputs"], case.inputs, strict=False)}
    out = fn(**feeds)
    missing = [k for k in names["outputs"] if k not in out]
    if missing:
        return {"status": FAIL, "detail": f"run: outputs {missing} missing from the "
                                          f"signature ({sorted(out)})"}
    got = [out[k].numpy() for k in names["outputs"]]
    problem = compare_outputs(case.outputs, got)
    if problem and "shape" not in problem and "dtype" not in problem:
        import onnx
        random = sorted(RANDOM_OPS.intersection(case_ops(onnx.load(case.model_path))))
        if random:  # still a mismatch: the values cannot be verified against one draw
            problem += (f" (random op {', '.join(random)}: ONNX's expected values are one "
                        "draw of its generator; dtype and shape match)")
    return {"status": MISMATCH if problem else PASS, "detail": problem or ""}


def worker(kind: str, root: str, log_path: str, names: Sequence[str]) -> None:
    """A child's loop over ``names``: convert/onnx2tf/check, one log line per event."""
    if kind == "check" and os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0":
        raise SystemExit("the check runs with TF_ENABLE_ONEDNN_OPTS=0 only")
    import tensorflow as tf  # noqa: F401  (start-up paid once, before the first case)

    if kind not in WORKER_KINDS:
        raise SystemExit(f"unknown worker kind {kind!r}: one of {WORKER_KINDS}")
    step = {"convert": _convert_ours, "onnx2tf": _convert_onnx2tf, "check": _check_saved}[kind]
    with open(log_path, "a") as log:
        for name in names:
            _log(log, case=name, event="start")
            if os.environ.get(CRASH_ON_ENV) == name:
                os.abort()
            out_dir = os.path.join(root, name)
            start = time.perf_counter()
            try:
                result = step(name, out_dir)
            except Exception as e:  # noqa: BLE001  (a converter or TF error is a finding)
                first = (str(e).strip().splitlines() or [""])[0]
                where = "run" if kind == "check" else "convert"
                result = {"status": FAIL, "detail": f"{where}: {type(e).__name__}: {first}"[:500]}
            if result["status"] == CONVERTED:
                with open(os.path.join(out_dir, "case.json"), "w") as f:
                    json.dump({"inputs": result.pop("inputs"),
                               "outputs": result.pop("outputs")}, f)
            result["seconds"] = round(time.perf_counter() - start, 3)
            _log(log, case=name, event="done", **result)


def _read_log(path: str) -> Dict[str, dict]:
    done, current = {}, None
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by a crash
                    continue
                if record.pop("event") == "start":
                    current = record["case"]
                else:
                    done[record["case"]] = record
    if current in done:
        current = None
    return {"done": done, "current": current}


def _child_env() -> dict:
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # onnx2tf shells out to the onnxsim CLI, which lives beside this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _run_child(kind: str, root: str, names: Sequence[str], timeout_s: float,
               log_path: str) -> tuple:
    """Runs one worker child over ``names``; returns (done, stuck case, reason)."""
    import signal
    import subprocess
    import tempfile

    # This file run as a script: benchmarks/ is no package.
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, root, log_path, *names]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=_child_env(),
                                start_new_session=True)
        watched, since = None, time.monotonic()
        reason = ""
        while proc.poll() is None:
            time.sleep(0.2)
            current = _read_log(log_path)["current"]
            if current != watched:
                watched, since = current, time.monotonic()
            # TF start-up counts against the first case's allowance too.
            if time.monotonic() - since > timeout_s + (30 if watched is None else 0):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                reason = f"timed out after {timeout_s:.0f} s"
                break
        if not reason and proc.returncode != 0:
            err.seek(0)
            lines = [ln for ln in err.read().splitlines() if ln.strip()]
            code = proc.returncode
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            reason = f"child {how}" + (f": {lines[-1].strip()[:200]}" if lines else "")
    state = _read_log(log_path)
    return state["done"], state["current"], reason


def run_chunk(kind: str, root: str, names: Sequence[str],
              timeout_s: Optional[float] = None) -> Dict[str, dict]:
    """``names`` through worker children of ``kind``; every case gets a result.

    A case during which a child crashes is rerun alone; a second crash marks it
    ``crash`` (a timeout ``fail``); the chunk's remaining cases go on in a new child.
    """
    timeout_s = timeout_s or TIMEOUT_S[kind]
    results: Dict[str, dict] = {}
    todo = list(names)
    attempt = 0
    while todo:
        attempt += 1
        log_path = os.path.join(root, f".{kind}-{os.getpid()}-{id(todo)}-{attempt}.jsonl")
        done, stuck, reason = _run_child(kind, root, todo, timeout_s, log_path)
        results.update(done)
        todo = [n for n in todo if n not in results]
        if not todo:
            break
        if not reason:
            reason = "child ended early"
        stuck = stuck or todo[0]
        if "timed out" in reason:
            results[stuck] = {"case": stuck, "status": FAIL, "detail": reason}
        elif len(todo) > 1 or attempt == 1:
            alone, _, again = _run_child(kind, root, [stuck], timeout_s,
                                         log_path + f".{stuck}.alone")
            results[stuck] = alone.get(stuck) or {
                "case": stuck, "status": FAIL if "timed out" in again else CRASH,
                "detail": (again or reason) + (" (also when run alone)" if again else "")}
        else:
            results[stuck] = {"case": stuck, "status": CRASH, "detail": reason}
        todo = [n for n in todo if n not in results]
    return results


def run_fresh(names: Sequence[str], root: str, kind: str = "convert",
              timeout_s: Optional[float] = None) -> Dict[str, dict]:
    """Converts ``names`` (``kind`` "convert" for ours, "onnx2tf" for plain onnx2tf) in
    one worker child and checks the SavedModels in one fresh oneDNN-off child.

    Returns case -> {"status", "detail", "convert_s"}: pass / refused / fail /
    mismatch / crash.
    """
    converted = run_chunk(kind, root, names, timeout_s)
    ok = [n for n in names if converted[n]["status"] == CONVERTED]
    checked = run_chunk("check", root, ok) if ok else {}
    out = {}
    for name in names:
        conv = converted[name]
        record = {"status": conv["status"], "detail": conv.get("detail", ""),
                  "convert_s": conv.get("seconds")}
        if name in checked:
            record["status"] = checked[name]["status"]
            record["detail"] = checked[name].get("detail", "")
        out[name] = record
    return out


def main(argv=None) -> None:
    """``python benchmarks/onnx_conformance_tool.py PREFIX...``: prints one line per case.

    ``--worker KIND ROOT LOG CASE...`` is the fresh-process route's child (run_chunk).
    """
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--worker"]:
        kind, root, log_path, *names = args[1:]
        worker(kind, root, log_path, names)
        return
    counts = {}
    for prefix in args or [""]:
        for name in list_cases(prefix):
            r = run_case(name)
            counts[r.status] = counts.get(r.status, 0) + 1
            print(f"{r.status:8s} {name}  {r.detail[:300]}", flush=True)
    print(counts)


if __name__ == "__main__":
    main()
