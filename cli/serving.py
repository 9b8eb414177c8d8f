"""``push`` and ``rollback`` (ServingPusher's core)."""
from __future__ import annotations

import argparse
import math
from typing import Any, Dict

from tfx_bridge.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    add_common,
    number_between,
    positive_int,
)
from tfx_bridge.serving_threads import CALLER_THREAD


def _inter_op(text: str) -> int:
    """A count of inter-op threads, or CALLER_THREAD."""
    if text.strip() == str(CALLER_THREAD):
        return CALLER_THREAD
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text}: give a count of threads (at least 1), or {CALLER_THREAD} to run "
            "each call in its calling thread") from None


def cmd_push(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.serving_pusher import serving
    from tfx_bridge.components.serving_pusher.config import PusherConfig

    config = PusherConfig(  # the component's one config, checked the same way
        base_path=args.base_path, model_name=args.model_name, label=args.label,
        target=args.target, allow_contract_change=args.allow_contract_change,
        keep_versions=args.keep_versions, warmup_records=args.warmup_records,
        server_base_path=args.server_base_path, target_cores=args.target_cores,
        intra_op_parallelism=args.intra_op_parallelism,
        inter_op_parallelism=args.inter_op_parallelism, cpu_allocator=args.cpu_allocator)
    progress = Progress(2, enabled=not args.quiet)
    # The executor's core: the same gates and the same "nothing new" check.
    result = serving.push_model(config, args.model, imported_model_dir=args.imported_model,
                                examples_dir=args.examples, lock_timeout_s=args.lock_timeout)
    progress(result.reason)
    print(("Pushed: " if result.pushed else "Not pushed: ") + result.reason)
    progress("Done")
    return {"pushed": result.pushed, "version": result.version,
            "destination": result.destination, "reason": result.reason,
            "labels": result.details.get("labels"),
            "_exit": EXIT_OK if result.pushed else EXIT_CHECK_FAILED}


def cmd_rollback(args: argparse.Namespace) -> Dict[str, Any]:
    from tfx_bridge.components.serving_pusher import serving

    labels = serving.rollback(args.base_path, args.model_name, args.to,
                              server_base_path=args.server_base_path)
    print(f"{args.model_name}: stable -> version {labels['stable']}; labels {labels}")
    return {"model_name": args.model_name, "labels": labels}


def add_parser(sub) -> None:
    """The push and rollback verbs."""
    from tfx_bridge.components.serving_pusher.base_layout import LABELS, MAX_WARMUP, TARGETS
    from tfx_bridge.components.serving_pusher.config import PusherConfig
    from tfx_bridge.cpu_allocator import ALLOCATORS

    defaults = PusherConfig.defaults()  # the component's, declared once
    psh = sub.add_parser("push", help="ServingPusher: validated, atomic push to TF Serving")
    psh.add_argument("--model", required=True, help="SavedModel or Model artifact folder")
    psh.add_argument("--base-path", required=True, help="TF Serving model base path")
    psh.add_argument("--model-name", required=True)
    psh.add_argument("--label", default=defaults.label, choices=list(LABELS))
    psh.add_argument("--target", default=defaults.target, choices=list(TARGETS))
    psh.add_argument("--imported-model", default=None,
                     help="the importer's Model folder the model came from: its verdict gates "
                          "the push and its source digest decides \"nothing new\"")
    psh.add_argument("--examples", default=None, help="Examples folder for warmup requests")
    psh.add_argument("--allow-contract-change", action="store_true",
                     help="push even if inputs/outputs differ from the served version")
    psh.add_argument("--keep-versions", type=positive_int, default=defaults.keep_versions)
    psh.add_argument("--warmup-records", type=positive_int, default=defaults.warmup_records,
                     help=f"warmup requests written and replayed (1 to {MAX_WARMUP}, default "
                          f"{defaults.warmup_records})")
    psh.add_argument("--server-base-path", default=defaults.server_base_path,
                     help="where the server sees --base-path (models.config and the manifest's "
                          f"mount use it; default {defaults.server_base_path})")
    psh.add_argument("--target-cores", type=positive_int, default=defaults.target_cores,
                     help="cores of the machine TF Serving runs on: its session threads and "
                          "batch threads (default: this machine's usable cores; "
                          "docs/guides/serving-config.md)")
    psh.add_argument("--intra-op-parallelism", type=positive_int,
                     default=defaults.intra_op_parallelism,
                     help="TF Serving's --tensorflow_intra_op_parallelism (default: the "
                          "target's cores)")
    psh.add_argument("--inter-op-parallelism", type=_inter_op,
                     default=defaults.inter_op_parallelism,
                     help="TF Serving's --tensorflow_inter_op_parallelism, or "
                          f"{CALLER_THREAD} to run each call in its calling thread (default: "
                          "what the optimizer measured faster on the target's cores, else "
                          "the target's cores)")
    psh.add_argument("--cpu-allocator", choices=ALLOCATORS, default=defaults.cpu_allocator,
                     help="TensorFlow's CPU allocator in the server, set in the manifest's "
                          "environment (default: bfc for --target cpu, malloc for gpu; "
                          "docs/guides/serving-config.md)")
    psh.add_argument("--lock-timeout", type=number_between(0.0, math.inf),
                     default=PusherConfig.LOCK_TIMEOUT_S,
                     help="seconds to wait for another push's lock before exit 4 (busy)")
    add_common(psh)
    psh.set_defaults(func=cmd_push)

    rb = sub.add_parser("rollback", help="move the stable label back to a pushed version")
    rb.add_argument("--base-path", required=True)
    rb.add_argument("--model-name", required=True)
    rb.add_argument("--to", type=int, required=True, help="version to serve as stable")
    rb.add_argument("--server-base-path", default=defaults.server_base_path,
                    help=f"where the server sees --base-path (default "
                         f"{defaults.server_base_path})")
    add_common(rb)
    rb.set_defaults(func=cmd_rollback)
