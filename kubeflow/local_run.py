"""Run a compiled Kubeflow (v2) pipeline spec on this machine, the way KFP would.

For each task in topological order it builds the ExecutorInput the KFP v2 backend passes
(parameters from the spec, input artifacts wired from upstream outputs, output artifacts
under a local root, an output metadata file), runs the task's preCacheCheck
(ParquetExampleGen's stock file-based driver) and its container command (``python -m
tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor --executor_class_path
...``) as processes of their own with ``{{$}}`` replaced by that JSON (forked from one
warm interpreter that imported what the tasks import; ``--fresh-interpreters`` starts
each anew), then reads the ExecutorOutput it wrote to wire downstream tasks. Output
artifacts go where KFP puts them, under the spec's pipeline root
(``runtimeConfig.gcsOutputDirectory``) when that is an object store
(``<root>/local-run-<id>/<task>/<key>``), else under ``root``; the tasks' executor
output files stay under ``root``. Importer tasks yield their artifact URI; resolver
tasks (LatestBlessedModelStrategy) yield nothing, as in a fresh project with no blessed
model yet. It proves the compiled pipeline runs under the Kubeflow entrypoints, not only
under LocalDagRunner. It holds the run locks ``tfx-bridge run`` takes (``root`` and a
local serving base path's model), so the two never run one pipeline at once: a busy lock
exits 4 naming its holder.

    python -m tfx_bridge.kubeflow.local_run pipeline.json /tmp/kfp-local
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from typing import Dict, List, Optional, Tuple

from tfx_bridge.pipelines.config import PipelineConfig

PLACEHOLDER = "{{$}}"


class LocalRunError(RuntimeError):
    """A task of the compiled spec failed; the message names it and its stderr tail."""


def _order(tasks: Dict[str, dict]) -> List[str]:
    deps = {}
    for name, task in tasks.items():
        needed = set(task.get("dependentTasks", []))
        for ref in task.get("inputs", {}).get("artifacts", {}).values():
            producer = ref.get("taskOutputArtifact", {}).get("producerTask")
            if producer:
                needed.add(producer)
        deps[name] = needed
    order, done = [], set()
    while len(order) < len(tasks):
        ready = sorted(n for n in tasks if n not in done and deps[n] <= done)
        if not ready:
            raise LocalRunError(f"Cycle among tasks {sorted(set(tasks) - done)}.")
        order.extend(ready)
        done.update(ready)
    return order


def _substitute(items: List[str], executor_input: str) -> List[str]:
    """``{{$}}`` -> the ExecutorInput JSON; the image's ``python`` -> this interpreter."""
    out = [executor_input if a == PLACEHOLDER else a for a in items]
    return [sys.executable if i == 0 and a == "python" else a for i, a in enumerate(out)]


def _preload(executors: Dict[str, dict]) -> List[str]:
    """What every task imports before it does anything: TensorFlow, Beam, torch, the
    TFX container modules the commands name and the executor classes' modules."""
    modules = ["tensorflow", "apache_beam", "torch", "tensorflow_transform",
               "tensorflow_data_validation"]
    for executor in executors.values():
        container = executor.get("container", {})
        hook = container.get("lifecycle", {}).get("preCacheCheck", {})
        for items in (container.get("command", []), container.get("args", []),
                      hook.get("command", [])):
            for i, item in enumerate(items):
                if i and items[i - 1] == "--executor_class_path":
                    modules.append(item.rpartition(".")[0])
                elif item.startswith("tfx.orchestration."):
                    modules.append(item)
    return list(dict.fromkeys(m for m in modules
                              if all(part.isidentifier() for part in m.split("."))))


def _run(cmd: List[str], task: str, env: dict, timeout: int,
         preload: Optional[List[str]]) -> None:
    """Runs a task's command. ``python -m MODULE ...`` runs in a process forked for it
    from a warm interpreter that has imported ``preload`` (and nothing run), so each
    task is its own process without paying TensorFlow's import each time; None:
    every command as a fresh interpreter."""
    if preload is not None and len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m":
        from tfx_bridge import child

        result = child.run_python(cmd[1:], None, timeout, env=env, warm=True, fresh=True,
                                  preload=preload)
        code, stderr = result.returncode, result.stderr
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        code, stderr = proc.returncode, proc.stderr
    if code != 0:
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        raise LocalRunError(f"Task {task!r} failed (exit {code}):\n{tail}")


def default_path_map() -> Dict[str, str]:
    """The image's schemas folder -> this install's, unless this machine has the image's
    path: a spec compiled with the defaults (README's command) then runs here too."""
    from tfx_bridge import schemas
    from tfx_bridge.kubeflow.compile import IMAGE_SCHEMAS

    if os.path.isdir(IMAGE_SCHEMAS):
        return {}
    return {IMAGE_SCHEMAS: os.path.dirname(schemas.path("demo.schema.pbtxt")) + "/"}


def _mapped(parameters: Dict[str, dict], path_map: Dict[str, str]) -> Dict[str, dict]:
    """String parameters with every image path prefix replaced by its local folder
    (inside JSON configs too: a prefix is a plain substring there)."""
    out = {}
    for key, value in parameters.items():
        text = value.get("stringValue")
        if isinstance(text, str):
            for image, local in path_map.items():
                text = text.replace(image, local)
            value = {"stringValue": text}
        out[key] = value
    return out


def _served_model(tasks: Dict[str, dict], path_map: Dict[str, str]
                  ) -> Optional[Tuple[str, str]]:
    """(serving base path, model name) of the spec's ServingPusher, if it has one."""
    for task in tasks.values():
        value = task.get("inputs", {}).get("parameters", {}).get("config", {})
        text = value.get("runtimeValue", {}).get("constantValue", {}).get("stringValue")
        try:
            config = json.loads(text) if text else None
        except ValueError:
            continue
        if isinstance(config, dict) and {"base_path", "model_name", "server_base_path"} \
                <= set(config):
            mapped = _mapped({"p": {"stringValue": str(config["base_path"])}}, path_map)
            return mapped["p"]["stringValue"], str(config["model_name"])
    return None


@contextlib.contextmanager
def _run_locks(root: str, served: Optional[Tuple[str, str]], timeout_s: float):
    """The locks ``tfx-bridge run`` takes, on this run's root and the served model (a
    local serving base path): a second run of either is refused naming the holder."""
    from tfx_bridge import runlock
    from tfx_bridge.components.serving_pusher.config import check_model_name

    with contextlib.ExitStack() as stack:
        places = [(root, runlock.LOCK_FILE, "this local run's root")]
        if served is not None:
            base, model = served
            check_model_name(model)
            places.append((base, runlock.model_lock_name(model),
                           f"model {model!r} under {base}"))
        for folder, name, what in places:
            dead = stack.enter_context(runlock.run_lock(folder, timeout_s, what=what,
                                                        name=name))
            if dead is not None:
                print(f"Took over the run lock of {what} from a run that died holding it "
                      f"({dead.describe()}).", file=sys.stderr)
        yield


def run_compiled(spec_path: str, root: str, timeout: int = 1800,
                 extra_env: Dict[str, str] = None,
                 path_map: Optional[Dict[str, str]] = None,
                 lock_timeout_s: float = PipelineConfig.defaults().lock_timeout_s,
                 fresh_interpreters: bool = False) -> Dict[str, Dict[str, list]]:
    """Runs every task; returns task -> output key -> runtime artifacts (JSON dicts).
    ``path_map`` maps path prefixes inside the image to local folders (default:
    :func:`default_path_map`). Holds the run locks of ``root`` and of the served
    model (as ``tfx-bridge run``): another run of either waits ``lock_timeout_s``
    seconds, then :class:`tfx_bridge.runlock.RunLocked` names it. Each task is a
    process of its own, forked from a warm interpreter that has imported what the
    tasks import (:func:`_run`); ``fresh_interpreters`` starts each as a new
    interpreter instead, as a container would (slower by TensorFlow's import per task)."""
    path_map = default_path_map() if path_map is None else path_map
    with open(spec_path) as f:
        job = json.load(f)
    spec = job.get("pipelineSpec", job)
    with _run_locks(root, _served_model(spec["root"]["dag"]["tasks"], path_map),
                    lock_timeout_s):
        return _run_tasks(job, spec, root, timeout, extra_env, path_map, fresh_interpreters)


def _run_tasks(job: dict, spec: dict, root: str, timeout: int,
               extra_env: Optional[Dict[str, str]], path_map: Dict[str, str],
               fresh_interpreters: bool) -> Dict[str, Dict[str, list]]:
    pipeline_root = job.get("runtimeConfig", {}).get("gcsOutputDirectory", "")
    artifact_root = (f"{pipeline_root.rstrip('/')}/local-run-{uuid.uuid4().hex[:8]}"
                     if "://" in pipeline_root else None)
    tasks = spec["root"]["dag"]["tasks"]
    components = spec["components"]
    executors = spec["deploymentSpec"]["executors"]
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.update(extra_env or {})
    preload = None if fresh_interpreters else _preload(executors)
    outputs: Dict[str, Dict[str, list]] = {}
    for name in _order(tasks):
        task = tasks[name]
        component = components[task["componentRef"]["name"]]
        executor = executors[component["executorLabel"]]
        out_defs = component.get("outputDefinitions", {}).get("artifacts", {})
        if "importer" in executor:
            uri = executor["importer"]["artifactUri"]["constantValue"]["stringValue"]
            outputs[name] = {"result": [{"name": f"{name}-result", "uri": uri, "metadata": {},
                                         "type": executor["importer"]["typeSchema"]}]}
            continue
        if "resolver" in executor:
            outputs[name] = {key: [] for key in out_defs}
            continue
        inputs = task.get("inputs", {})
        parameters = _mapped({k: v["runtimeValue"]["constantValue"]
                              for k, v in inputs.get("parameters", {}).items()
                              if "constantValue" in v.get("runtimeValue", {})}, path_map)
        artifacts = {}
        for key, ref in inputs.get("artifacts", {}).items():
            src = ref["taskOutputArtifact"]
            artifacts[key] = {"artifacts": outputs[src["producerTask"]][src["outputArtifactKey"]]}
        task_root = os.path.join(root, name)
        os.makedirs(task_root, exist_ok=True)
        out_artifacts = {key: {"artifacts": [{
            "name": f"{name}-{key}", "type": d["artifactType"],
            "uri": (f"{artifact_root}/{name}/{key}" if artifact_root
                    else os.path.join(task_root, key)), "metadata": {}}]}
            for key, d in out_defs.items()}
        output_file = os.path.join(task_root, "executor_output.json")
        executor_input = {"inputs": {"parameters": parameters, "artifacts": artifacts},
                          "outputs": {"artifacts": out_artifacts, "outputFile": output_file}}
        container = executor["container"]
        driver = container.get("lifecycle", {}).get("preCacheCheck")
        if driver:
            _run(_substitute(driver["command"] + driver.get("args", []),
                             json.dumps(executor_input)), name + " (driver)", env, timeout,
                 preload)
            with open(output_file) as f:
                driven = json.load(f)
            # The KFP backend updates the task's parameters (the resolved span's
            # input_config, span, fingerprint) and output artifacts from the driver.
            for key, value in driven.get("parameterValues", {}).items():
                if isinstance(value, str):
                    parameters[key] = {"stringValue": value}
                elif float(value).is_integer():
                    parameters[key] = {"intValue": str(int(value))}
                else:
                    parameters[key] = {"doubleValue": value}
            for key, found in driven.get("artifacts", {}).items():
                for mine, theirs in zip(out_artifacts[key]["artifacts"], found["artifacts"],
                                        strict=True):
                    mine["metadata"] = theirs.get("metadata", {})
        _run(_substitute(container["command"] + container.get("args", []),
                         json.dumps(executor_input)), name, env, timeout, preload)
        with open(output_file) as f:
            result = json.load(f)
        outputs[name] = {}
        for key, declared in out_artifacts.items():
            written = result.get("artifacts", {}).get(key, {}).get("artifacts", [])
            merged = []
            for mine, theirs in zip(declared["artifacts"], written or declared["artifacts"],
                                    strict=True):
                merged.append({**mine, "metadata": theirs.get("metadata", mine["metadata"])})
            outputs[name][key] = merged
    return outputs


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tfx_bridge.kubeflow.local_run",
        description="Execute a compiled Kubeflow (v2) pipeline spec on this machine, task by "
                    "task, under the Kubeflow entrypoints.")
    parser.add_argument("spec", help="pipeline JSON written by tfx-bridge compile-kfp")
    parser.add_argument("root", help="local folder for the tasks' outputs")
    parser.add_argument("--map-path", action="append", default=[], metavar="IMAGE=LOCAL",
                        help="a path prefix inside the component image and the local folder "
                             "that stands for it (repeatable; the image's schemas folder "
                             "maps to this install's by default)")
    parser.add_argument("--lock-timeout", type=float,
                        default=PipelineConfig.defaults().lock_timeout_s, metavar="SECONDS",
                        help="wait this long for another run of this root or served model "
                             "before exit 4 (busy); default: refuse at once")
    parser.add_argument("--fresh-interpreters", action="store_true",
                        help="start every task as a new Python interpreter, as a container "
                             "would (default: forked from one that has imported what the "
                             "tasks import, which saves TensorFlow's import per task)")
    args = parser.parse_args(argv)
    if not args.lock_timeout >= 0 or args.lock_timeout == float("inf"):
        parser.error(f"--lock-timeout {args.lock_timeout}: give a number of seconds >= 0")
    if not os.path.isfile(args.spec):
        print(f"{parser.prog}: {args.spec} is not a file; give the JSON that "
              "`tfx-bridge compile-kfp --output FILE` wrote.", file=sys.stderr)
        return 2
    try:
        with open(args.spec) as f:
            json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        print(f"{parser.prog}: {args.spec} is not JSON ({e}); give the JSON that "
              "`tfx-bridge compile-kfp --output FILE` wrote.", file=sys.stderr)
        return 2
    path_map = default_path_map()
    for item in args.map_path:
        image, sep, local = item.partition("=")
        if not sep or not image or not local:
            print(f"{parser.prog}: --map-path {item!r}: give IMAGE_PREFIX=LOCAL_FOLDER.",
                  file=sys.stderr)
            return 2
        path_map[image] = local
    from tfx_bridge.errors import BridgeError, Busy

    try:
        outputs = run_compiled(args.spec, args.root, path_map=path_map,
                               lock_timeout_s=args.lock_timeout,
                               fresh_interpreters=args.fresh_interpreters)
    except Busy as e:
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 4
    except BridgeError as e:  # a lock path that cannot be a lock, a bad model name
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 2
    print(json.dumps({task: {k: [a["uri"] for a in v] for k, v in outs.items()}
                      for task, outs in outputs.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
