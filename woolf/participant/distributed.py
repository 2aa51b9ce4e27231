"""`woolf train` on several processes: launched by `--nproc N` or by torchrun itself.

Usage:
    launch(["-C", str(root), "train", "--steps", "60"], nproc=2, device="cpu")   # what --nproc N runs
    torchrun --standalone --nproc-per-node 2 -m woolf train --steps 60              # the same, by hand
    group = join("cpu")   # inside `woolf train`: None in one process, else Group(rank, world, device)

``launch`` starts N copies of ``python -m woolf train ...`` under PyTorch's elastic agent (what
torchrun runs), standalone on this machine. In each copy ``join`` sets up the process group from
torchrun's environment (gloo on the CPU, nccl on CUDA, one device per rank) and
woolf/participant/train.py gives rank 0 the ledger's work: it pulls, reserves the task, and
alone evaluates and keeps the result; every rank loads the same base and trains its share of
each global batch (woolf/workloads/parallel.py). When any rank fails the agent stops the others;
``launch`` then raises TrainingFailed naming the first rank that failed, and no result of the
run is kept (rank 0 writes the result only after the last step, which every rank took).
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass

from woolf.errors import TrainingFailed, UsageError

FAULT = "WOOLF_TEST_RANK_EXIT"  # "RANK:STEP": that rank exits with status 3 at that step (the tests' dying rank)


@dataclass(frozen=True)
class Group:
    rank: int
    world: int
    device: str


def under_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def rank_of() -> int:
    """This process's rank under torchrun (0 when alone)."""
    return int(os.environ.get("RANK", "0")) if under_torchrun() else 0


def check_nproc(nproc: int, device: str) -> None:
    """Refuse a number of processes that cannot run: below 1, or more than the CUDA devices here."""
    import torch  # deferred: torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if nproc < 1:
        raise UsageError(f"--nproc {nproc}: at least one process is needed")
    if device == "cuda" and nproc > torch.cuda.device_count():
        raise UsageError(f"--nproc {nproc}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                         "each process takes one", hint=f"use --nproc {max(1, torch.cuda.device_count())} or fewer")


def join(device: str) -> Group | None:
    """The process group of this torchrun copy (set up once), or None when running alone."""
    if not under_torchrun():
        return None
    import torch  # deferred: torch
    import torch.distributed as dist  # deferred: torch.distributed

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    if device == "cuda":
        if local >= torch.cuda.device_count():
            raise UsageError(f"rank {rank} has no CUDA device (local rank {local}, "
                             f"{torch.cuda.device_count()} here)", hint="start at most one process per device")
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return Group(rank, world, device)


def broadcast(value, group: Group | None):
    """Rank 0's ``value`` on every rank (a collective: every rank calls it)."""
    if group is None:
        return value
    import torch.distributed as dist  # deferred: torch.distributed

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def leave(group: Group | None) -> None:
    if group is not None:
        import torch.distributed as dist  # deferred: torch.distributed

        if dist.is_initialized():
            dist.destroy_process_group()


def fault_check(rank: int, step: int) -> None:
    """The tests' way to make a rank die mid-run (``WOOLF_TEST_RANK_EXIT=RANK:STEP``)."""
    spec = os.environ.get(FAULT)
    if spec and spec == f"{rank}:{step}":
        sys.stderr.write(f"rank {rank}: exiting at step {step} ({FAULT})\n")
        sys.stderr.flush()
        os._exit(3)


def launch(argv: list[str], nproc: int, device: str) -> None:
    """Run ``python -m woolf *argv`` as ``nproc`` processes of one torchrun group on this machine."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError  # deferred: torch
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch  # deferred: torch

    check_nproc(nproc, device)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"woolf-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                          monitor_interval=0.5, start_method="spawn")
    try:
        elastic_launch(config, sys.executable)("-m", "woolf", *argv)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        how = (f"was killed by signal {-failure.exitcode}" if failure.exitcode < 0
               else f"exited with status {failure.exitcode}")
        raise TrainingFailed(f"training process rank {rank} of {nproc} {how}; the others were stopped and "
                             "nothing from this run was saved or submitted",
                             hint="its error is printed above; fix it and run `woolf train` again") from None
