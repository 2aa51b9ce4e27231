"""The participant's side of the task lifecycle: reserve before training, record the PR after submit.

Usage:
    task = reserve_for_training(ledger, "alice", head, steps=60, take=None)   # woolf train
    record_submitted(ledger, task_id, sub_id)                                 # woolf submit
"""

from __future__ import annotations


def reserve_for_training(ledger, who: str, head, steps: int, take: str | None):
    """The task `woolf train` runs under (None without an origin on the git-native forge)."""
    from woolf.errors import UsageError
    from woolf.ledger.tasks import reserve, take_shard

    if not ledger.has_origin() or ledger.config.forge.kind != "local":
        if take:
            raise UsageError("--take needs a ledger with an origin on the git-native forge")
        return None
    return reserve(ledger, who, head, take_shard(ledger, take) if take else f"{who}@v{head.version}", steps)


def record_submitted(ledger, task_id: str, sub_id: str) -> None:
    """The task's final record names its PR (a failure here leaves only a lease to expire)."""
    import logging

    from woolf.errors import WoolfError
    from woolf.ledger.tasks import Task, fetch_tasks
    from woolf.protocol.tasks import parse_record, task_ref

    try:
        fetch_tasks(ledger)
        tip = ledger.git.rev_parse(task_ref(task_id))
        rec, _ = parse_record(ledger.git.message(tip), task_id) if tip else (None, None)
        if rec is not None:
            Task(ledger, rec, tip).finish("submitted", submission=sub_id)
    except WoolfError as exc:
        logging.getLogger("woolf.tasks").warning("task %s: submitted not recorded: %s", task_id, exc.message)


def take_shard_data(shard: str) -> tuple[str, int]:
    """(owner, base version) of a shard named ``owner@vN``: whose data a taken task trains on."""
    owner, _, version = shard.partition("@v")
    return owner, int(version)
