"""A segment of a run trained on N processes, replayed on N gloo processes (the declared process layout).

Usage (woolf/ledger/replay.py replay_segment calls it when the recipe says ``nproc`` > 1):
    got = replay_in_ranks(ledger, recipe, "dense", state_path, first, last, keep_end, deadline)
    got.end, got.fingerprints, got.end_state, got.out        # as the in-process Replay gives them

PyTorch's elastic agent (what torchrun runs) starts N copies of ``rank_main`` on this machine, each in
a gloo process group; each loads the served state (every rank's generators are in it: dropout is drawn
per rank) and replays the segment with DDP exactly as `woolf train --nproc N` trained it, at the
recipe's thread count. Every rank checks the deadline together (one all-reduce a step), so a replay past
its time stops on all of them at the same step. Rank 0 writes what the replay gave to a folder the
caller reads.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from woolf.errors import Rejected
from woolf.ledger.ledger import Ledger
from woolf.storage import kinds
from woolf.storage.weights import save_atomic


@dataclass
class RanksReplay:
    end: dict | None
    fingerprints: list[str]
    end_state: dict | None
    out: dict


def rank_main(root: str, spec_path: str) -> dict | None:
    """One rank of the replay (a module-level function: the elastic agent spawns it by name)."""
    import torch  # deferred: torch
    import torch.distributed as dist  # deferred: torch.distributed
    from safetensors.torch import load_file  # deferred: safetensors

    from woolf.ledger.replay import ReplayTimeout, replay_segment  # deferred: torch

    spec = json.loads(Path(spec_path).read_text())
    dist.init_process_group("gloo")
    try:
        ledger = Ledger.open(Path(root))
        ledger.main_ref = spec["main_ref"]
        deadline = spec["deadline"]

        def stop_together() -> bool:
            late = torch.tensor([1.0 if deadline is not None and time.time() > deadline else 0.0])
            dist.all_reduce(late, op=dist.ReduceOp.MAX)
            return bool(late.item())

        try:
            hook, out = replay_segment(ledger, spec["recipe"], kinds.get(spec["kind"]), load_file(spec["state"]),
                                       spec["first"], spec["last"], "cpu", keep_end=spec["keep_end"],
                                       in_ranks=True, stop=stop_together)
        except ReplayTimeout as exc:
            return {"timeout": str(exc)} if dist.get_rank() == 0 else None
        if dist.get_rank() != 0:
            return None
        folder = Path(spec["out"])
        save_atomic({k: v.contiguous() for k, v in out.items()}, folder / "out.safetensors", durable=False)
        if hook.end_state is not None:
            save_atomic(hook.end_state, folder / "end.safetensors", durable=False)
        return {"end": hook.end, "fingerprints": hook.fingerprints}
    finally:
        dist.destroy_process_group()


def replay_in_ranks(ledger, recipe: dict, kind: str, state_path: Path, first: int, last: int, keep_end: bool,
                    deadline: float | None) -> RanksReplay:
    """The segment replayed on ``recipe["nproc"]`` gloo processes; ``deadline`` is time.time()-based."""
    from safetensors.torch import load_file  # deferred: safetensors
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError  # deferred: torch
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch  # deferred: torch

    from woolf.ledger.replay import ReplayTimeout  # deferred: torch

    nproc = int(recipe.get("nproc", 1))
    with tempfile.TemporaryDirectory(prefix="woolf-replay-") as tmp:
        spec = {"recipe": recipe, "kind": kind, "state": str(state_path), "first": first, "last": last,
                "keep_end": keep_end, "deadline": deadline, "out": tmp, "main_ref": ledger.main_ref}
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc,
                              run_id=f"woolf-replay-{uuid.uuid4().hex[:8]}", rdzv_backend="c10d",
                              rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.5,
                              start_method="spawn")
        try:
            got = elastic_launch(config, rank_main)(str(ledger.root), str(Path(tmp) / "spec.json"))
        except ChildFailedError as exc:
            rank, failure = exc.get_first_failure()
            raise Rejected(f"retrain: its segment could not be replayed on {nproc} processes (rank {rank}: "
                           f"{' '.join(str(failure.message).split())[:200]})") from None
        first_rank = got.get(0) or {}
        if "timeout" in first_rank:
            raise ReplayTimeout(first_rank["timeout"])
        end = Path(tmp) / "end.safetensors"
        return RanksReplay(first_rank.get("end"), first_rank.get("fingerprints", []),
                           load_file(end) if end.is_file() else None, load_file(Path(tmp) / "out.safetensors"))
