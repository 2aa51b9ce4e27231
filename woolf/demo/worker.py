"""The processes of a demo network: participants and validators, each in its own clone.

Usage:
    python -m woolf.demo.worker participant CLONE --name p1 --rounds 4 --steps 60 --delay 1.5 [--wait-verdict 30]

A participant's ``--delay`` makes it slower hardware: the seconds are spread over its
training steps (so a participant that follows the ledger sees merges while it trains).
    python -m woolf.demo.worker validator CLONE --name v1 --stop-file DIR/.stop [--dishonest]

Each prints one JSON line per event to stdout (the demo collects them in logs/). The demo starts
them forked from a `python -P` zygote (woolf/demo/zygote.py; off Linux, `python -P -m woolf.demo.worker`):
a `woolf/` folder in the cwd is never imported. A
worker exits 1 with one `error:` line when it cannot go on, or when none of its rounds opened a PR.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from woolf.demo.adversaries import adversary
from woolf.errors import WoolfError
from woolf.forges.local import LocalForge
from woolf.ledger.ledger import Ledger


def _event(**kw) -> None:
    print(json.dumps({"t": round(time.time(), 3), **kw}), flush=True)


def _await_verdict(ledger, sub_id: str, wait: float) -> None:
    """Up to ``wait`` seconds until our PR is no longer open, so that the next round trains from a version
    that holds it (a real contribution takes minutes, its verdict seconds: demo/regimes.py); meanwhile
    the validators' challenges to our open PRs are answered, as `woolf prove` does (participant/prove.py)."""
    from woolf.participant.prove import prove_once  # deferred: loads torch

    forge, deadline = LocalForge.for_ledger(ledger), time.time() + wait
    while time.time() < deadline and forge.get(sub_id).state == "open":
        try:
            prove_once(ledger, forge)
        except WoolfError as exc:
            _event(kind="error", who="prove", error=exc.message)
        time.sleep(0.3)


def participant(clone: Path, name: str, rounds: int, steps: int, delay: float, seed: int,
                wait: float = 0.0) -> str | None:
    """Contribute ``rounds`` times; None, or the last error when no round got a PR open."""
    from woolf.participant import (  # deferred: loads numpy, yaml
        SubmitOptions,
        TrainOptions,
        submit,
        train,
    )

    ledger = Ledger.open(clone)

    def slower(step, total, loss):  # slower hardware trains slower: `delay` seconds more per contribution
        time.sleep(delay / total)

    done, last = 0, None
    for r in range(rounds):
        try:
            result = train(ledger, TrainOptions(steps=steps, contributor=name, seed=seed * 1000 + r,
                                                device="cpu", progress=slower if delay else None))
            sub = submit(ledger, SubmitOptions(contributor=name, message=f"{name} round {r}"))
            _event(kind="submitted", who=name, round=r, id=sub["id"], base=result["base_version"],
                   local_loss=result["metrics"]["after"]["loss"])
            done += 1
            if wait and (r + 1 < rounds or ledger.config.validators.retrain_rate > 0):  # the last PR's audit too
                _await_verdict(ledger, sub["id"], wait)
        except WoolfError as exc:
            _event(kind="error", who=name, round=r, error=exc.message)
            last = exc.message
    return last if not done else None


def validator(clone: Path, name: str, stop_file: Path, interval: float, dishonest: bool = False) -> None:
    from woolf.demo.dishonest import DishonestValidator  # deferred: loads torch, numpy
    from woolf.validator import Validator  # deferred: loads torch, numpy

    v = (DishonestValidator if dishonest else Validator)(Ledger.open(clone), device="auto", name=name)
    idle = 0  # passes without a verdict since the stop file appeared
    while True:
        stopping = stop_file.exists()
        done = v.run(on_verdict=lambda d: _event(kind="verdict", who=name, **d.to_json()))
        idle = idle + 1 if stopping and not done else 0
        # under a quorum a pass can end with votes pending on others: drain a few more passes
        if idle > (8 if v.ledger.config.validators.quorum > 1 and v.forge.list(state="open") else 0):
            return
        if not done:
            time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="woolf.demo.worker")
    ap.add_argument("role", choices=["participant", "validator", "adversary"])
    ap.add_argument("clone", type=Path)
    ap.add_argument("--name", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wait-verdict", type=float, default=0.0,
                    help="participant: wait up to this many seconds for its PR's verdict before the next round")
    ap.add_argument("--stop-file", type=Path)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--dishonest", action="store_true", help="validator: vote accept on everything (demo)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    try:
        if args.role == "participant":
            failed = participant(args.clone, args.name, args.rounds, args.steps, args.delay, args.seed,
                                 args.wait_verdict)
            if failed:
                print(f"error: no round of {args.rounds} opened a PR; the last: {failed}", file=sys.stderr, flush=True)
                return 1
        elif args.role == "adversary":  # woolf/demo/adversaries.py: the name is the kind of cheat

            adversary(args.clone, args.name, args.rounds, args.steps, args.seed, args.delay or 2.0)
        else:
            validator(args.clone, args.name, args.stop_file, args.interval, args.dishonest)
    except KeyboardInterrupt:
        return 130
    except WoolfError as exc:  # the demo quotes this line when it reports the worker dead
        print(f"error: {exc.message}" + (f" (hint: {exc.hint})" if exc.hint else ""), file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
