"""What a demo run measured (DemoResult, `woolf demo --json`) and how its network is judged at the end.

Usage (woolf/demo/run.py fills it in as the network runs, then judges it from an observer clone):
    result = DemoResult(str(root), participants=3, validators=2, rounds=8, steps=30)
    judge_validators(observer, result, liar)    # who `woolf validators` flags; merges short of k honest votes
    outcomes(observer, result, adversaries)     # each contributor's merged/rejected/rating; honest ranked first?
    result.to_json()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from woolf.demo.lora import contribution_words
from woolf.demo.regimes import DEFAULT as DEFAULT_REGIME
from woolf.demo.regimes import REGIMES
from woolf.protocol.trailers import json_field, parse_message
from woolf.protocol.votes import parse_vote
from woolf.report.board import credit, leaderboard
from woolf.report.validators import validators_report


@dataclass
class DemoResult:
    dir: str
    participants: int
    validators: int
    rounds: int
    steps: int
    regime: str = DEFAULT_REGIME  # demo/regimes.py
    regime_words: str = REGIMES[DEFAULT_REGIME].words
    lora: str | None = None  # the participants' LoRA spec (`--lora R`, demo/lora.py); None: dense deltas
    contributions: str = contribution_words(None, "")  # what each PR carries, in words
    merged_kinds: dict = field(default_factory=dict)  # delta kind -> merged PRs
    lora_bytes: int | None = None  # median factor file of a LoRA PR
    dense_bytes: int | None = None  # a dense float32 delta of this model, for comparison
    versions_merged: int = 0
    prs_rejected: int = 0
    rejections: dict = field(default_factory=dict)  # reason -> count
    genesis_loss: float | None = None
    final_loss: float | None = None
    final_version: int | None = None
    best_version: int | None = None  # the version with the lowest benchmark loss
    best_loss: float | None = None
    regressing_merges: int = 0  # merges whose loss is above their parent version's
    activity: dict = field(default_factory=dict)  # contributor -> {merged, rejected, open, withdrawn}
    alone_loss: float | None = None  # the best participant training alone, same steps
    alone_loss_mean: float | None = None
    alone_losses: dict = field(default_factory=dict)
    margin_noise: float | None = None  # 2 s.e. of the per-window loss difference, ledger vs best alone
    margin_windows: int = 0  # the benchmark windows that noise is over
    parallel_loss: float | None = None  # synchronous data parallel, same workers and steps
    baseline_loss: float | None = None  # centralized: one worker, all the steps in sequence
    total_steps: int = 0
    network_seconds: float = 0.0  # the network alone, without set-up, references and report
    reference_seconds: float = 0.0
    wall_seconds: float = 0.0
    setup_seconds: float = 0.0  # the hub, clones and genesis, before the network starts
    genesis_build_seconds: float | None = None  # building the pretrained genesis (None: it was cached)
    interrupted: bool = False
    report: str | None = None
    quorum: int = 1
    dishonest: str | None = None  # the validator that votes accept on everything (--dishonest-validator)
    merges_without_honest_quorum: int = 0  # merged versions resting on fewer than k honest votes (target 0)
    flagged: list = field(default_factory=list)  # validators `woolf validators` flags
    adversaries: list = field(default_factory=list)  # kinds of cheating participants (network/adversaries.py)
    outcomes: dict = field(default_factory=dict)  # contributor -> merged, rejected, marked, rating, adversary
    honest_above_adversaries: bool | None = None  # every honest participant rated above every adversary

    def to_json(self) -> dict:
        return asdict(self)


def judge_validators(observer, result: DemoResult, liar: str | None) -> None:
    """Who the report flags, and how many merges rest on fewer than k honest votes (the target is 0)."""
    result.dishonest = liar
    report = validators_report(observer)
    result.flagged = [v["name"] for v in report["validators"] if v["flagged"]]
    for v in observer.log(ref=observer.main_ref):
        if not v.submission:
            continue
        named = json_field(parse_message(observer.git.message(v.commit))[1], "Woolf-Votes") or []
        voters = {b.validator for b in (parse_vote(observer.git, sha, v.submission, "loss")[0]
                                        for sha in named if isinstance(sha, str)) if b is not None}
        if len(voters - {liar}) < result.quorum:
            result.merges_without_honest_quorum += 1


def outcomes(observer, result: DemoResult, adversaries: list[str]) -> None:
    """What each contributor got, from the leaderboard (report/board.py), and whether honesty ranked first."""
    rows = leaderboard(observer)["rows"]
    shares = {c["contributor"]: c["share"] for c in credit(observer)["rows"]}
    for r in rows:
        result.outcomes[r["contributor"]] = {"merged": r["merged"], "rejected": r["rejected"], "marked": r["flagged"],
                                             "rating": r["ordinal"], "adversary": r["contributor"] in adversaries,
                                             "credit": shares.get(r["contributor"])}
    honest = [r["ordinal"] for r in rows if r["contributor"] not in adversaries and r["ordinal"] is not None]
    cheats = [r["ordinal"] if r["ordinal"] is not None else float("-inf") for r in rows
              if r["contributor"] in adversaries]
    if adversaries and honest:
        result.honest_above_adversaries = not cheats or min(honest) > max(cheats)
