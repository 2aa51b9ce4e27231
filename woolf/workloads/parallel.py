"""Training on several processes with PyTorch's own engine: DDP, or FSDP2 when a model does not fit one device.

Usage:
    ctx = Parallel.current()          # None in a single process; set up by torchrun (WORLD_SIZE > 1)
    rows = ctx.share(8)               # this rank's slice of each global batch of 8 rows
    model = ctx.wrap(model, device, sharded=False)   # DDP (or FSDP2 with sharded=True)
    state = ctx.full_state(model, names)   # rank 0: the whole model's tensors; others: {}
    ctx.barrier()

A workload that declares the ``distributed`` feature (woolf/workloads/features.py) runs its
``train`` unchanged on every rank: every rank draws the same global batch from the same seed
and takes its own rows (``share``), so N processes see exactly the rows one process would,
and the averaged gradient is the one process's gradient (up to the order of float sums).
The process group is set up by the caller (woolf/participant/distributed.py) from torchrun's
environment: gloo on CPU, nccl on CUDA.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class Parallel:
    rank: int
    world: int
    local_rank: int

    @staticmethod
    def current() -> Parallel | None:
        """This process's place when a process group of more than one is initialized, else None."""
        if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
            return None
        return Parallel(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))

    def share(self, rows: int) -> slice:
        """This rank's contiguous slice of ``rows`` (the first ``rows % world`` ranks take one more)."""
        base, extra = divmod(rows, self.world)
        start = self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (1 if self.rank < extra else 0))

    def wrap(self, model: torch.nn.Module, device: str, sharded: bool = False,
             block_names: frozenset[str] = frozenset()) -> torch.nn.Module:
        """DDP over the process group; FSDP2 (``fully_shard`` per block named in ``block_names``,
        then the whole model) when ``sharded``: each rank then holds 1/N of the parameters,
        gradients and optimizer state."""
        if sharded:
            for module in model.modules():
                if type(module).__name__ in block_names:
                    fully_shard(module)
            return fully_shard(model)
        ids = [torch.device(device).index or 0] if torch.device(device).type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def full_state(self, model: torch.nn.Module, sharded: bool) -> dict[str, torch.Tensor]:
        """The whole model's state on the CPU at rank 0 (gathered from the shards with FSDP2); {} elsewhere.
        Without sharding every rank holds the same weights and rank 0's own are returned as they are."""
        if not sharded:
            return dict(model.state_dict()) if self.rank == 0 else {}
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return state if self.rank == 0 else {}

    def barrier(self) -> None:
        dist.barrier()
