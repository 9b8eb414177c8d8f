"""A function on N local processes under ``torch.distributed``: what
PyTorchTrainer runs a ``run_fn`` with when ``custom_config["num_workers"]`` > 1.

:func:`run` spawns the ranks (fresh interpreters: nothing of the launcher's
state is shared but what is pickled), each with ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` set and the process group initialised at
the rendezvous store the launcher serves on a port it bound (gloo unless nccl
is asked for; with CUDA devices each rank's current device is its own, round
robin). A rank that raises fails the
run with that rank's error (:class:`DistributedRunError`, the user's frames
only); torch stops the other ranks, so no process is left behind.

Inside a rank, :func:`world` gives ``(rank, world_size)`` (the reader's
``shard``), :func:`is_primary` says whether this rank saves; ``training.fit``
wraps the model in DistributedDataParallel and ``model.save`` writes on rank 0
only. Outside :func:`run` they say ``(0, 1)`` and True. No TFX imports.

Example (not run here: it spawns processes)::

    run(mymod.train_rank, (config,), nprocs=2)   # mymod importable by the ranks
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable, Optional, Tuple

from tfx_bridge.errors import BridgeError, describe_failure


class DistributedRunError(BridgeError):
    """A rank of a distributed run raised; the message names the rank and its error."""


def world() -> Tuple[int, int]:
    """(rank, world size) of this process: (0, 1) outside a distributed run."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_primary() -> bool:
    """This process is rank 0 (the one that saves the model and its metrics)."""
    return world()[0] == 0


def backend() -> str:
    """gloo: it all-reduces CPU and CUDA tensors alike, so it works whatever device
    the run_fn trains on (nccl, faster between GPUs, takes CUDA tensors only: ask
    for it with ``which="nccl"`` / custom_config ``distributed_backend``)."""
    return "gloo"


def _rank_main(rank: int, fn: Callable, args: tuple, nprocs: int, port: int, which: str,
               errors: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank),
                       "WORLD_SIZE": str(nprocs), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})
    if torch.cuda.is_available():  # one GPU per rank, round robin: cuda means this one
        torch.cuda.set_device(rank % torch.cuda.device_count())
    # A client of the launcher's store (see run): the rank binds no rendezvous port.
    store = dist.TCPStore("127.0.0.1", port, is_master=False)
    dist.init_process_group(which, store=store, rank=rank, world_size=nprocs)
    try:
        fn(*args)
    except BaseException as e:
        # Said here, where the exception and its frames are; the launcher reads it.
        with open(os.path.join(errors, f"rank-{rank}.txt"), "w", encoding="utf-8") as f:
            f.write(str(e) if isinstance(e, BridgeError) else describe_failure(e))
        raise
    finally:
        dist.destroy_process_group()


def run(fn: Callable, args: tuple = (), nprocs: int = 2,
        which: Optional[str] = None) -> None:
    """``fn(*args)`` on ranks 0..nprocs-1 (``fn`` importable by name in a fresh
    interpreter, ``args`` picklable). Returns when every rank has; a rank that
    raised is :class:`DistributedRunError` naming it and its error."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if nprocs < 1:
        raise DistributedRunError(f"num_workers {nprocs}: give 1 or more.")
    # The rendezvous store is served from here, on the port the OS gave a bind to port
    # 0, and open until every rank has ended: no port is found free, then bound later
    # (by then another program may hold it).
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    with tempfile.TemporaryDirectory(prefix="tfx-bridge-ranks-") as errors:
        try:
            mp.start_processes(_rank_main, args=(fn, tuple(args), nprocs, store.port,
                                                 which or backend(), errors),
                               nprocs=nprocs, join=True, start_method="spawn")
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
            rank = e.error_index
            path = os.path.join(errors, f"rank-{rank}.txt")
            said = open(path, encoding="utf-8").read() if os.path.exists(path) else (
                str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__)
            raise DistributedRunError(f"rank {rank} of {nprocs} failed: {said}") from None
