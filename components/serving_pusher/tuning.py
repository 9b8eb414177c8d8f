"""TF Serving's session threads, CPU allocator and batching, from the target's cores
and the model's measured latency curve (docs/guides/serving-config.md says the rule
and why).

No TFX imports. The latencies come from the optimizer's ``report.json`` beside the
model (p50/p99 per batch size of the candidate it kept); an importer's report, or
none, measures nothing, and batch sizes and timeout keep the target's defaults. A
report this module cannot read is a note in the push's record, never an error:
tuning is advice on top of a push that is sound without it.

Example:
    >>> curve = [LatencyPoint(1, 2.0, 3.0), LatencyPoint(32, 16.0, 20.0)]
    >>> derive_batching(curve, cores=4)["values"]["batch_timeout_micros"]
    750
    >>> flat = [LatencyPoint(1, 1.0, 1.5), LatencyPoint(32, 32.0, 40.0)]
    >>> derive_batching(flat, cores=4)["values"]["max_execution_batch_size"]
    1
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

from tfx_bridge import limits
from tfx_bridge.artifacts.layout import REPORT_JSON
from tfx_bridge.components.serving_pusher.base_layout import BATCHING_DEFAULTS
from tfx_bridge.components.serving_pusher.errors import PusherConfigError
from tfx_bridge.cpu_allocator import ALLOCATORS, BFC, MALLOC, allocator_env
from tfx_bridge.serving_threads import CALLER_THREAD, SESSION_FLAGS, session_flags, usable_cores
from tfx_bridge.storage import fs

# A larger batch counts only when its p50 per row is at least this much below the
# last one kept: smaller gains are within a shared host's run-to-run noise.
MIN_ROW_SAVING = 0.10
# The timeout is at most this share of what batching saves per row at batch 1's
# latency: a batch formed by the timeout is underfull, so it saves less than a full one.
TIMEOUT_SHARE = 0.5
# Never above the CPU default: at light load no batch forms and a lone request waits
# the whole timeout, and a latency curve cannot tell how often a companion arrives in
# time; the curve only tells when waiting is worth less than that.
MAX_TIMEOUT_MICROS = BATCHING_DEFAULTS["cpu"]["batch_timeout_micros"]
# The batch-size fields derived together: a user who gives one of them owns them all,
# so a derived value never contradicts a given one (TF Serving refuses such a mix).
SIZE_FIELDS = ("max_batch_size", "enable_large_batch_splitting", "max_execution_batch_size",
               "allowed_batch_sizes")
# The optimizer's report: the kept candidate's name, every candidate's latencies.
REPORT_CANDIDATE, REPORT_CANDIDATES, REPORT_P50_AFTER = (
    "candidate", "candidates", "latency_after_ms")
# The optimizer's session-threads measurement (trt_optimizer/session_threads.py).
REPORT_SESSION = "session"
MAX_REPORT_BYTES = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class LatencyPoint:
    batch: int
    p50_ms: float
    p99_ms: Optional[float]


def _positive(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def _kept_latency(report: dict) -> list:
    """The latency entries of the candidate the optimizer kept ([] when none is named)."""
    candidates = report.get(REPORT_CANDIDATES)
    for candidate in candidates if isinstance(candidates, list) else []:
        if isinstance(candidate, dict) and candidate.get("name") == report.get(
                REPORT_CANDIDATE):
            latency = candidate.get("latency")
            return latency if isinstance(latency, list) else []
    return []


def read_report(model_dir: Optional[str]) -> Tuple[Optional[dict], Optional[str],
                                                   List[str]]:
    """(the optimizer's report in ``model_dir`` or None, its path, notes)."""
    if model_dir is None:
        return None, None, ["no model report was given: no latency measured"]
    path = fs.join(model_dir, REPORT_JSON)
    try:
        if not fs.exists(path):
            return None, path, [f"{path} does not exist: no latency measured"]
        report = limits.read_json(path, PusherConfigError, "Re-run the optimizer that "
                                  "wrote it.", MAX_REPORT_BYTES)
    except (ValueError, OSError) as e:  # BridgeErrors are ValueErrors
        return None, path, [f"{path} could not be read ({str(e)[:200]}): no latency used"]
    if not isinstance(report, dict):
        return None, path, [f"{path} holds a {type(report).__name__}, not an object: "
                            "no latency used"]
    return report, path, []


def read_latency(report: dict, path: str) -> Tuple[List[LatencyPoint], Optional[dict],
                                                   List[str]]:
    """(points sorted by batch, where they came from, notes) from the optimizer's
    ``report`` read from ``path``; no points and a note when there are none to read."""
    notes: List[str] = []
    points: Dict[int, LatencyPoint] = {}
    for item in _kept_latency(report):
        batch = item.get("batch") if isinstance(item, dict) else None
        p50 = _positive(item.get("p50_ms")) if isinstance(item, dict) else None
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1 or p50 is None:
            notes.append(f"{path}: latency entry {item!r:.120} skipped (expected a batch "
                         ">= 1 and a positive p50_ms)")
            continue
        points[batch] = LatencyPoint(batch, p50, _positive(item.get("p99_ms")))
    source = {"report": path, "candidate": report.get(REPORT_CANDIDATE),
              "figures": "p50_ms and p99_ms"}
    if not points and isinstance(report.get(REPORT_P50_AFTER), dict):
        # Older reports, or a kept candidate missing from the list: p50 only.
        for key, value in report[REPORT_P50_AFTER].items():
            batch = str(key).rsplit("_", 1)[-1]
            if batch.isdigit() and int(batch) >= 1 and _positive(value) is not None:
                points[int(batch)] = LatencyPoint(int(batch), float(value), None)
        source["figures"] = f"{REPORT_P50_AFTER} (p50 only)"
    if not points:
        return [], None, notes + [f"{path} has no latency measurements (an importer's "
                                  "report has none; `tfx-bridge optimize` measures them)"]
    return [points[b] for b in sorted(points)], source, notes


def measured_inter_op(report: Optional[dict], path: Optional[str], cores: int,
                      target: str, intra_op: int
                      ) -> Tuple[Optional[int], Optional[dict], List[str]]:
    """(``CALLER_THREAD`` when the optimizer measured the model faster with each call
    run in its calling thread on a host of the target's cores, with the intra-op
    threads served (``intra_op``), else None; what was measured;
    notes). Measured on another count of cores it is not applied: with more cores, a
    pool may overlap branches that the calling thread runs one by one; nor with other
    intra-op threads, which decide how long each node the calling thread runs takes."""
    session = report.get(REPORT_SESSION) if isinstance(report, dict) else None
    if not isinstance(session, dict) or session.get("inter_op_parallelism") != CALLER_THREAD:
        return None, None, []
    measured = session.get("cores")
    record = {"report": path, "cores": measured, "reason": session.get("reason")}
    if target != "cpu":
        return None, record, [f"{path}: the calling-thread session was measured on CPU; "
                              f"not applied to a {target} target"]
    if isinstance(measured, bool) or measured != cores:
        return None, record, [
            f"{path}: running each call in its calling thread measured faster on "
            f"{measured!r} cores, not on the target's {cores}: not applied (give "
            f"inter_op_parallelism={CALLER_THREAD} to serve it so)"]
    measured_intra = session.get("intra_op_parallelism")
    if intra_op != measured_intra:
        return None, record, [
            f"{path}: running each call in its calling thread measured faster with "
            f"{measured_intra!r} intra-op threads, not the {intra_op} served: not applied "
            f"(give inter_op_parallelism={CALLER_THREAD} to serve it so)"]
    return CALLER_THREAD, record, []


def _row_cost(point: LatencyPoint) -> Tuple[float, Optional[float]]:
    return point.p50_ms / point.batch, (None if point.p99_ms is None
                                        else point.p99_ms / point.batch)


def derive_batching(points: List[LatencyPoint], cores: int,
                    floor_max_batch: int = BATCHING_DEFAULTS["cpu"]["max_batch_size"]
                    ) -> Dict[str, Any]:
    """BatchingParameters values from a latency curve: ``values`` and ``why``.

    The execution batch is the largest measured batch whose p50 per row is at least
    MIN_ROW_SAVING below the last batch kept and whose p99 per row is not above it.
    Requests up to ``floor_max_batch`` rows are still accepted (split into execution
    batches), so a small execution batch never refuses a request that fits today.
    The timeout is TIMEOUT_SHARE of the per-row saving at batch 1's latency, at most
    MAX_TIMEOUT_MICROS (the CPU default): 0 when batching saves nothing.
    """
    kept = points[0]
    for point in points[1:]:
        (p50_kept, p99_kept), (p50_row, p99_row) = _row_cost(kept), _row_cost(point)
        tail_ok = p99_row is None or p99_kept is None or p99_row <= p99_kept
        if p50_row <= p50_kept * (1 - MIN_ROW_SAVING) and tail_ok:
            kept = point
    one = points[0]
    # Without a batch-1 figure, the smallest batch's per-row cost stands in for it:
    # below the real batch-1 latency on a falling curve, so the timeout comes out smaller.
    one_ms = one.p50_ms / one.batch
    saving = max(0.0, 1 - (kept.p50_ms / kept.batch) / one_ms) if kept is not one else 0.0
    share = int(TIMEOUT_SHARE * saving * one_ms * 1000)
    timeout = min(MAX_TIMEOUT_MICROS, share)
    execution = kept.batch
    allowed = sorted({2 ** i for i in range(execution.bit_length()) if 2 ** i < execution}
                     | {execution})
    values = {"max_batch_size": max(floor_max_batch, execution),
              "enable_large_batch_splitting": True,
              "max_execution_batch_size": execution, "allowed_batch_sizes": allowed,
              "batch_timeout_micros": timeout, "num_batch_threads": cores}
    why = (f"p50 per row {one_ms:.4g} ms at batch {one.batch}, "
           f"{kept.p50_ms / kept.batch:.4g} ms at batch {kept.batch} (saving "
           f"{saving:.1%}); execution batch {execution}; timeout "
           f"{TIMEOUT_SHARE} x saving x batch-1 latency = {share} us, at most "
           f"{MAX_TIMEOUT_MICROS} us: {timeout} us")
    return {"values": values, "why": why, "row_saving": round(saving, 4)}


def default_allocator(target: str) -> str:
    """The CPU allocator a push serves with unless one is given: BFC on CPU targets,
    where malloc's fresh mappings of large tensors cost up to a third of a call
    (tfx_bridge/cpu_allocator.py); TF's own choice on GPU targets, where it was not
    measured."""
    return BFC if target == "cpu" else MALLOC


@dataclasses.dataclass(frozen=True)
class Session:
    """TF Serving's session thread pools for a host of ``cores`` cores, and the CPU
    allocator its process runs with (an environment variable, not a flag)."""

    cores: int
    intra_op: int
    inter_op: int
    # TF's own unless a push chose one: a session built without it changes nothing.
    cpu_allocator: str = MALLOC

    def flags(self) -> List[str]:
        return session_flags(self.intra_op, self.inter_op)

    def env(self, memory_limit_mb: Optional[int]) -> Dict[str, str]:
        """The server container's environment for the allocator."""
        return allocator_env(self.cpu_allocator, memory_limit_mb)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Optional[dict], allocator: str = MALLOC
                  ) -> Optional[Session]:
        """A recorded session, or None for a state written before it was recorded.
        ``allocator`` stands in where none (or one this version does not know) was
        recorded: by default TF's own, which is what a server ran before the pusher
        chose one."""
        try:
            recorded = data.get("cpu_allocator", allocator)
            return cls(**{k: int(data[k]) for k in ("cores", "intra_op", "inter_op")},
                       cpu_allocator=recorded if recorded in ALLOCATORS else allocator)
        except (AttributeError, TypeError, KeyError, ValueError):
            return None


@dataclasses.dataclass(frozen=True)
class Tuning:
    """What a push serves with: session threads, BatchingParameters values (every
    field the file will hold), and where each value came from."""

    session: Session
    batching: Dict[str, Any]
    origins: Dict[str, str]
    measurement: Optional[dict]
    notes: Tuple[str, ...]
    # The optimizer's calling-thread measurement the inter-op value came from, if any.
    session_measurement: Optional[dict] = None

    def record(self) -> dict:
        """push.json's and the state's account of it."""
        return {"target_cores": self.session.cores,
                "session": {SESSION_FLAGS[0]: self.session.intra_op,
                            SESSION_FLAGS[1]: self.session.inter_op},
                "cpu_allocator": self.session.cpu_allocator,
                "batching": dict(self.batching), "origins": dict(self.origins),
                "measurement": self.measurement,
                "session_measurement": self.session_measurement, "notes": list(self.notes)}


def tune(config, model_dir: Optional[str] = None) -> Tuning:
    """The session and batching a push of ``config`` serves with; the latencies from
    ``model_dir``'s report (None: not measured). Given values always win."""
    given = dict(config.batching_parameters or {})
    origins: Dict[str, str] = {}
    cores = config.target_cores
    origins["target_cores"] = "host" if cores is None else "given"
    cores = usable_cores() if cores is None else cores
    report, path, notes = read_report(model_dir)
    inter_op, session_measured, more = measured_inter_op(
        report, path, cores, config.target, config.intra_op_parallelism or cores)
    notes += more if not config.inter_op_parallelism else []
    session = Session(cores, config.intra_op_parallelism or cores,
                      config.inter_op_parallelism or inter_op or cores,
                      config.cpu_allocator or default_allocator(config.target))
    origins[SESSION_FLAGS[0]] = "given" if config.intra_op_parallelism else "cores"
    origins[SESSION_FLAGS[1]] = ("given" if config.inter_op_parallelism
                                 else "measured" if inter_op else "cores")
    origins["cpu_allocator"] = "given" if config.cpu_allocator else "default"
    batching = dict(BATCHING_DEFAULTS[config.target])
    origins.update({k: "default" for k in batching})
    batching["num_batch_threads"], origins["num_batch_threads"] = cores, "cores"
    points, source = [], None
    if report is not None:
        points, source, more = read_latency(report, path)
        notes += more
    measurement = None
    if config.target != "cpu":
        notes.append(f"batch sizes and timeout keep the {config.target} defaults: the rule "
                     "reads CPU latency curves")
    elif len(points) < 2:
        if points:
            notes.append("one batch size measured, no curve: batch sizes and timeout keep "
                         "the cpu defaults")
        else:
            notes.append("batch sizes and timeout keep the cpu defaults")
    else:
        derived = derive_batching(points, cores, BATCHING_DEFAULTS["cpu"]["max_batch_size"])
        measurement = {**source, "latency_ms": [dataclasses.asdict(p) for p in points],
                       "row_saving": derived["row_saving"], "rule": derived["why"]}
        owned = sorted(set(SIZE_FIELDS) & set(given))
        if owned:
            notes.append(f"batch sizes given ({', '.join(owned)}): none derived")
        for key, value in derived["values"].items():
            if key in SIZE_FIELDS and owned:
                continue
            batching[key], origins[key] = value, ("cores" if key == "num_batch_threads"
                                                  else "measured")
    for key, value in given.items():
        batching[key], origins[key] = value, "given"
    if batching.get("allowed_batch_sizes"):
        batching["allowed_batch_sizes"] = [int(v) for v in batching["allowed_batch_sizes"]]
    return Tuning(session, batching, origins, measurement, tuple(notes),
                  session_measured if origins[SESSION_FLAGS[1]] == "measured" else None)


_INT_FIELDS = {"max_batch_size": 1, "max_execution_batch_size": 1, "max_enqueued_batches": 1,
               "num_batch_threads": 1, "batch_timeout_micros": 0}


def batching_problems(params: Dict[str, Any]) -> List[str]:
    """What TF Serving would refuse in BatchingParameters ``params`` when it loads the
    model (batching_session.cc's checks), each with the field and the fix."""
    problems = []
    for key, least in _INT_FIELDS.items():
        value = params.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < least):
            problems.append(f"batching {key} must be an int >= {least}, got {value!r}")
    for key in ("enable_large_batch_splitting", "pad_variable_length_inputs"):
        if params.get(key) is not None and not isinstance(params[key], bool):
            problems.append(f"batching {key} must be true or false, got {params[key]!r}")
    allowed = params.get("allowed_batch_sizes")
    if allowed is not None and (not isinstance(allowed, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in allowed)):
        return problems + [f"batching allowed_batch_sizes must be a list of ints >= 1, got "
                           f"{allowed!r}"]
    if problems:
        return problems
    top = params.get("max_batch_size")
    split = bool(params.get("enable_large_batch_splitting"))
    execution = params.get("max_execution_batch_size") or top
    if split and top is not None and execution > top:
        problems.append(f"batching max_execution_batch_size {execution} exceeds "
                        f"max_batch_size {top}: give max_batch_size >= {execution}")
    if allowed:
        if any(b <= a for a, b in zip(allowed[:-1], allowed[1:], strict=True)):
            problems.append(f"batching allowed_batch_sizes {list(allowed)} must increase")
        last, name = (execution, "max_execution_batch_size") if split else (
            top, "max_batch_size")
        if last is not None and allowed[-1] != last:
            problems.append(f"batching allowed_batch_sizes must end at {name} ({last}), "
                            f"got {list(allowed)}: end the list at {last} or give "
                            f"{name}={allowed[-1]}")
    return problems
