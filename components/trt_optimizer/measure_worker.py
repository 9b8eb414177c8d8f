"""Timing the saved candidates in a child process whose TensorFlow runs the kernels
stock TF Serving on CPU runs: oneDNN off (``TF_ENABLE_ONEDNN_OPTS=0``, read once,
when TensorFlow starts, so it cannot be switched in the caller's process), no GPU,
and the CPU allocator the pusher's manifest gives the server (``child.SERVING_CPU_ENV``,
the importer's equivalence check's worker too; the report records which ran). The
parent gives the folders, the serving flags and the feeds; the child loads each
folder as TF Serving would (:func:`measure.load_servable`), times them
(:func:`measure.measure_budgeted`) and prints the figures.

    python -m tfx_bridge.components.trt_optimizer.measure_worker SPEC.json
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from typing import Dict, Optional, Set, Tuple

import numpy as np

from tfx_bridge import child, cpu_allocator
from tfx_bridge.components.trt_optimizer import decide
from tfx_bridge.components.trt_optimizer.errors import OptimizerError
from tfx_bridge.components.trt_optimizer.results import Latency
from tfx_bridge.storage import fs

MODULE = "tfx_bridge.components.trt_optimizer.measure_worker"
MARKER = "TFX_BRIDGE_TIMED "


def time_in_child(folders: Dict[str, tuple],
                  feeds: Dict[int, Dict[str, np.ndarray]], budget_s: float,
                  iterations: int, min_rounds: int, timeout_s: float, warm: bool = True,
                  refuse: Optional[dict] = None) -> Tuple[Dict[str, list], dict]:
    """``{name: [Latency per batch timed]}`` and the plan, for each ``name: (folder,
    flags)`` or ``name: (folder, flags, session)`` (:func:`measure.load_servable`'s
    arguments) timed on ``feeds`` (``{batch: {input: array}}``) in a oneDNN-off child:
    a warm worker, or with ``warm=False`` a fresh process (an independent
    re-timing). ``refuse`` (``{"reference": name, "alpha": a, "margin": m}``) drops
    a candidate from the larger batch sizes once :func:`decide.speedup` refuses it
    at a smaller one."""
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-timing-") as work:
        arrays, layout = {}, {}
        for b, batch_feeds in feeds.items():
            layout[str(b)] = {}
            for i, (name, value) in enumerate(sorted(batch_feeds.items())):
                arrays[f"b{b}_{i}"] = value
                layout[str(b)][name] = f"b{b}_{i}"
        np.savez(os.path.join(work, "feeds.npz"), **_without_objects(arrays))
        spec = {"folders": {n: [entry[0], list(entry[1]), *entry[2:]]
                            for n, entry in folders.items()},
                "feeds": os.path.join(work, "feeds.npz"), "layout": layout,
                "budget_s": budget_s, "iterations": iterations, "min_rounds": min_rounds,
                "refuse": refuse}
        spec_path = os.path.join(work, "spec.json")
        fs.write_text(spec_path, json.dumps(spec))
        result = child.run_python(["-m", MODULE, spec_path], MARKER, timeout=timeout_s,
                                  env=child.SERVING_CPU_ENV, warm=warm)
    if result.returncode != 0 or not isinstance(result.payload, dict):
        raise OptimizerError(
            f"timing the candidates in a child process (oneDNN off) failed (exit "
            f"{result.returncode}): {result.stderr_tail}; the folders timed were "
            f"{sorted(folders)}")
    latency = {name: [Latency(**x) for x in rows]
               for name, rows in result.payload["latency"].items()}
    return latency, result.payload["info"]


def main(spec_path: str) -> None:
    from tfx_bridge.components.trt_optimizer import measure

    spec = json.loads(fs.read_text(spec_path))
    arrays = _with_objects(np.load(spec["feeds"]))
    servables = {name: measure.load_servable(*entry) for name, entry in spec["folders"].items()}
    calls = {}
    for b, names in spec["layout"].items():
        feeds = {name: arrays[key] for name, key in names.items()}
        calls[int(b)] = {name: (s.call, s.prepare(feeds)) for name, s in servables.items()}
    timed, info = measure.measure_budgeted(calls, spec["budget_s"], spec["iterations"],
                                           spec["min_rounds"], refuse=_refusal(spec["refuse"]))
    info["onednn"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    info["cpu_allocator"] = cpu_allocator.allocator_of(os.environ)
    latency = {name: [dataclasses.asdict(timed[b][name]) for b in sorted(timed)
                      if name in timed[b]] for name in servables}
    print(MARKER + json.dumps({"latency": latency, "info": info}), flush=True)


_BYTES, _LENGTHS = "__bytes", "__lengths"


def _without_objects(arrays: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """String feeds (numpy object arrays of bytes or str) as their bytes joined and the
    lengths: the feeds file is then read without pickle, and every value, trailing
    NULs included, comes back whole (a fixed-width bytes dtype would drop them)."""
    out = {}
    for key, value in arrays.items():
        if value.dtype != object:
            out[key] = value
            continue
        items = [v.encode() if isinstance(v, str) else bytes(v) for v in value.reshape(-1)]
        out[key + _BYTES] = np.frombuffer(b"".join(items), np.uint8)
        out[key + _LENGTHS] = np.concatenate(
            [[len(value.shape)], value.shape, [len(v) for v in items]]).astype(np.int64)
    return out


def _with_objects(stored) -> Dict[str, np.ndarray]:
    """:func:`_without_objects` undone (string feeds as object arrays of bytes)."""
    out = {}
    for key in stored.files:
        if key.endswith(_LENGTHS):
            continue
        if not key.endswith(_BYTES):
            out[key] = stored[key]
            continue
        name = key[:-len(_BYTES)]
        data, meta = stored[key].tobytes(), stored[name + _LENGTHS]
        rank = int(meta[0])
        shape, lengths = [int(d) for d in meta[1:1 + rank]], meta[1 + rank:]
        ends = np.cumsum(lengths)
        values = np.empty(len(lengths), object)
        values[:] = [data[e - n:e] for n, e in zip(lengths.tolist(), ends.tolist(),
                                                    strict=True)]
        out[name] = values.reshape(shape)
    return out


def _refusal(rule: Optional[dict]):
    if not rule:
        return None
    reference = rule["reference"]

    def refuse(latencies: Dict[str, Latency]) -> Set[str]:
        return {name for name, lat in latencies.items() if name != reference
                and decide.speedup(lat, latencies[reference], rule["alpha"],
                                   rule["margin"]).refused}
    return refuse


if __name__ == "__main__":
    main(sys.argv[1])
