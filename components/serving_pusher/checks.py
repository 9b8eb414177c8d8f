"""Load checks before a push: fresh-process load, contract, TFLite signature, target.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from tfx_bridge import child
from tfx_bridge.artifacts.savedmodel import (
    SERVER_FLAGS,
    SERVING_SIGNATURE,
    TFLITE_FILE,
    TFLITE_FLAG,
)
from tfx_bridge.components.serving_pusher.base_layout import (
    TARGETS,
)
from tfx_bridge.components.serving_pusher.errors import (
    PusherConfigError,
    PushRefused,
)

# --------------------------------------------------------------------------- inspect



INSPECT_MODULE = "tfx_bridge.components.serving_pusher.inspect_model"


def inspect_model(saved_model_dir: str, warmup_file: str = "") -> dict:
    """Loads the SavedModel in a separate process (a warm worker: a crash or a hang there
    refuses the push, never takes the pusher down): signatures, and warmup replayed;
    the same for ``model.tflite`` when the folder has one (``"tflite"``)."""
    result = child.run_python(["-m", INSPECT_MODULE, saved_model_dir, warmup_file, TFLITE_FILE],
                              "INSPECT ", timeout=900, env=child.warm_env(), warm=True)
    if result.returncode != 0 or result.payload is None:
        raise PushRefused(f"{saved_model_dir} does not load in a fresh process: "
                          f"{result.stderr_tail}")
    return result.payload


def serving_signature(saved_model_dir: str, name: str = SERVING_SIGNATURE) -> dict:
    """A signature's inputs/outputs read from saved_model.pb (no graph is loaded).
    A model without it fails the push's checks (recorded as pushed=0), not the config."""
    from tfx_bridge.artifacts.savedmodel import SavedModelError, signature_specs

    try:
        return signature_specs(saved_model_dir, name)
    except SavedModelError as e:
        raise PushRefused(str(e)) from e


# --------------------------------------------------------------------------- checks


def contract_changes(old: dict, new: dict) -> List[str]:
    """What breaks clients of ``old`` (serving_default signatures from inspect_model)."""
    problems = []
    oi, ni = old["inputs"], new["inputs"]
    for name, spec in sorted(oi.items()):
        if name not in ni:
            problems.append(f"input {name!r} ({spec['dtype']}) was removed or renamed "
                            f"(new inputs: {sorted(ni)})")
        elif ni[name]["dtype"] != spec["dtype"]:
            problems.append(f"input {name!r} changed dtype {spec['dtype']} -> "
                            f"{ni[name]['dtype']}")
        elif not _shape_compatible(spec["shape"], ni[name]["shape"]):
            problems.append(f"input {name!r} changed shape {spec['shape']} -> "
                            f"{ni[name]['shape']}")
    for name in sorted(set(ni) - set(oi)):
        problems.append(f"input {name!r} is new; clients of the served version do not send it")
    oo, no = old["outputs"], new["outputs"]
    for name, spec in sorted(oo.items()):
        if name not in no:
            problems.append(f"output {name!r} was removed or renamed (new outputs: {sorted(no)})")
        elif no[name]["dtype"] != spec["dtype"]:
            problems.append(f"output {name!r} changed dtype {spec['dtype']} -> "
                            f"{no[name]['dtype']}")
    return problems


def _shape_compatible(old: Optional[list], new: Optional[list]) -> bool:
    if old is None or new is None:
        return True
    if len(old) != len(new):
        return False
    return all(a is None or b is None or a == b for a, b in zip(old, new, strict=True))


def check_tflite(inspected: dict, saved_model_sig: dict) -> None:
    """``model.tflite`` (served under --prefer_tflite_model) must offer serving_default
    with the SavedModel's input and output names and dtypes."""
    if not inspected.get("tflite"):
        return
    lite = inspected["tflite"]["signatures"].get(SERVING_SIGNATURE)
    if lite is None:
        raise PushRefused(f"{TFLITE_FILE} has no serving_default signature (it has "
                          f"{sorted(inspected['tflite']['signatures'])}); a server with "
                          f"{TFLITE_FLAG} would serve it. Rebuild it or remove it.")
    problems = []
    for side in ("inputs", "outputs"):
        want = {k: v["dtype"] for k, v in saved_model_sig[side].items()}
        if lite[side] != want:
            problems.append(f"{side} {lite[side]} vs the SavedModel's {want}")
    if problems:
        raise PushRefused(f"{TFLITE_FILE} does not match the SavedModel's serving_default: "
                          + "; ".join(problems) + ". Rebuild it from this SavedModel.")
    error = (inspected["tflite"].get("warmup") or {}).get("error")
    if error:
        raise PushRefused(f"{TFLITE_FILE} failed the warmup requests: {error}. A server "
                          f"with {TFLITE_FLAG} would fail to load it; rebuild it.")


def check_target(target: str, serving_flags: Sequence[str] = ()) -> None:
    """Configuration the pusher cannot act on: an unknown target or server flag."""
    if target not in TARGETS:
        raise PusherConfigError(f"target {target!r}: use one of {TARGETS}.")
    unknown = sorted(set(serving_flags) - set(SERVER_FLAGS))
    if unknown:
        raise PusherConfigError(
            f"The model needs TF Serving flags {unknown}, which ServingPusher does not know "
            f"how to configure (known: {list(SERVER_FLAGS)}). Serve it with a hand-written "
            "server config.")


def check_runs_on(target: str, requires_gpu: bool) -> None:
    """A model the target's servers cannot run is refused (a recorded result)."""
    if requires_gpu and target == "cpu":
        raise PushRefused(
            "The model needs a GPU (TensorRT engines); TF Serving's CPU image has no "
            "TRTEngineOp. Push the non-TRT model to CPU servers, or use --target gpu.")


