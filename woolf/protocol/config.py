"""Typed, validated ledger configuration read from ``ledger/woolf.toml``.

Usage:
    cfg = load_config(Path("ledger/woolf.toml"))
    cfg.merge.alpha_base, cfg.policy.min_improvement
    text = render_config(LedgerConfig(name="demo"))    # woolf/protocol/config_text.py: the TOML writer
    # the allowed values of every key: woolf/protocol/config_check.py
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from woolf.errors import ConfigError
from woolf.protocol.config_check import check_config  # the allowed value of every key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG_PATH = "ledger/woolf.toml"


@dataclass
class StalenessConfig:
    kind: str = "inverse"  # inverse 1/(1+s) | polynomial (1+s)^-a | hinge | constant
    a: float = 0.5  # polynomial exponent, or hinge slope
    b: int = 4  # hinge: staleness up to b is not attenuated


@dataclass
class MergeConfig:
    rule: str = "attenuated"  # attenuated | nesterov | delayed_nesterov | fedbuff (woolf/core/merge_rules.py)
    alpha_base: float = 1.0  # scale of every merged delta (before the rule)
    max_staleness: int = 16  # PRs staler than this are rejected unread
    outer_lr: float = 0.7  # nesterov/delayed_nesterov: outer learning rate; fedbuff: server learning rate
    momentum: float = 0.9  # outer (server) momentum; fedbuff with 0 is plain FedBuff
    buffer: int = 4  # delayed_nesterov: merges per momentum update; fedbuff: deltas per applied step
    staleness: StalenessConfig = field(default_factory=StalenessConfig)


@dataclass
class PolicyConfig:
    metric: str = "loss"  # key of the workload's evaluation dict
    direction: str = "minimize"  # minimize | maximize
    min_improvement: float = -0.02  # required gain; negative = tolerated regression
    gate: str = "current"  # compare with: current (the version merged on) | best (best of the last `window`)
    window: int = 8  # gate = best: how many recent versions' recorded metrics count
    # most behind the best version since the config last changed (0: off; -1: 2x the tolerance)
    max_drawdown: float = -1.0
    require_retrain: bool = False  # refuse PRs that cannot be re-trained (private data, no recipe)


@dataclass
class WorkloadConfig:
    name: str = "charlm"  # built-in name, or an entry point in the group "goodwoolf.workloads"
    command: str = ""  # external training command with {base} {out} {data} {steps}
    steps: int = 60  # default training steps per contribution
    auto_seconds: float = 60.0  # `woolf train --steps auto`: aim for contributions of about this long
    max_steps: int = 10_000  # `--steps auto` never trains more steps than this
    follow_every: int = 0  # every N steps, move local progress onto main's newest version (0: never)
    error_feedback: bool = False  # carry what the ledger did not merge of a PR into the next delta
    params: dict = field(default_factory=dict)  # passed to the workload (model size, ...)


@dataclass
class BenchmarkConfig:
    path: str = "ledger/benchmark/benchmark.txt"  # held-out data, committed in git
    sha256: str = ""  # pins the benchmark's bytes
    hidden_sha256: str = ""  # validator-private held-out set: only its sha256 and size are public
    hidden_size: int = 0


@dataclass
class LimitsConfig:
    max_delta_bytes: int = 2 * 1024**3  # largest delta file accepted
    max_header_bytes: int = 1024 * 1024  # largest safetensors JSON header
    max_tensors: int = 10_000  # most tensors in one file
    max_delta_norm_ratio: float = 100.0  # |delta| / |weights| above this is rejected unevaluated
    min_delta_norm_ratio: float = 1e-6  # |delta| / |weights| below this is a no-op, rejected unevaluated
    max_lora_rank: int = 256  # a lora delta's factor pairs of higher rank are rejected unread
    # multiply-adds of expanding a lora delta's pairs (sum of rank x rows x cols): over it, rejected unexpanded
    max_lora_expand: float = 5e11
    max_batch: int = 4096  # a recipe's batch above this is refused
    max_retrain_seconds: float = 600.0  # a recipe estimated or running longer to re-train is refused


@dataclass
class ScoringConfig:
    """Contribution scores, copies and the norm guard (woolf/validator/screen.py and score.py,
    docs/protocol.md#scoring)."""

    enabled: bool = True  # measure each delta on its assigned shard and on a random one
    sample_bytes: int = 8192  # bytes of each shard evaluated (the benchmark is usually 4x this)
    uniqueness: str = "mark"  # random shard improved >= assigned: mark | reject | off
    min_effect: float = 1e-5  # a delta that moves neither the benchmark nor its shard by this changes nothing
    min_assigned: float = float("-inf")  # least loss a delta must remove on its own shard (-inf: off; demo 0.01)
    copy_threshold: float = 0.97  # |cosine| to a recent or earlier-received delta above this: a copy
    copy_window: int = 16  # merged versions whose deltas a PR is compared with (plus earlier open PRs)
    norm_multiple: float = 10.0  # |delta| over this multiple of the median recent merged |delta| (0: off)
    norm_window: int = 8  # merged deltas the median is taken over (needs 3 or more)
    norm_action: str = "reject"  # reject | clip


@dataclass
class QueueConfig:
    max_open_per_contributor: int = 64  # PRs of one contributor beyond this many open are rejected unread
    fair: bool = True  # round-robin by contributor, then by receive time


@dataclass
class DeltaConfig:
    accept: list = field(default_factory=lambda: ["dense", "topk"])  # delta kinds validators take (dense, topk, lora)
    compress: str = "dense"  # participants' default: dense | topk:FRACTION[,bits:B][,chunk:C]


@dataclass
class StorageConfig:
    snapshot_every: int = 50  # full weights kept for every K-th version (and the newest); `woolf gc`


@dataclass
class ForgeConfig:
    kind: str = "local"  # local: PRs as refs in the git origin | github: GitHub/Gitea/Forgejo REST API
    api_url: str = "https://api.github.com"  # Gitea/Forgejo: https://HOST/api/v1
    repo: str = ""  # owner/name of the ledger's repository on the forge
    delta_schemes: list = field(default_factory=lambda: ["https"])  # where fork deltas may be read
    delta_timeout: float = 300.0  # seconds allowed to download one delta
    verdict_authors: list = field(default_factory=list)  # GitHub logins whose comments carry verdicts


@dataclass
class SigningConfig:
    contributors: str = "optional"  # optional | required: submissions signed by a key in allowed_signers


@dataclass
class ValidatorsConfig:
    quorum: int = 1  # k: validators whose signed votes must agree before a PR is settled (1: one decides)
    epsilon: float = 1e-3  # votes agree when their policy metrics differ by at most this (GPUs differ)
    vote_timeout: float = 3600.0  # seconds after its first vote a PR without quorum is settled as expired
    flag_rate: float = 0.25  # `woolf validators` flags a validator disagreeing with settled outcomes more often
    retrain_rate: float = 0.0  # share of PRs re-trained from their recipe before merging (validator/retrain.py)
    retrain_tolerance: float = 0.02  # |retrained - submitted| / |submitted| above this: a mismatch
    # how a PR is evaluated (validator/paired.py): "sequential" stops a rejection as soon as the benchmark's
    # windows drawn so far settle it at `confidence` (an acceptance is always measured on every window), and
    # scoring stops once its decisions are settled; "full": every window of the benchmark and of each shard
    eval: str = "sequential"
    confidence: float = 0.999  # sequential: a decision the full evaluation would not make at most 1 - this often
    # sequential: the gate may stop a rejection once the windows drawn so far settle it. Off by default: an
    # improvement carried by a few windows (a domain fine-tune) looks like a regression on most blocks, and
    # was rejected early far more often than 1 - confidence (benchmarks/RESULTS.md §23)
    early_reject: bool = False


@dataclass
class ProofConfig:
    """Proof of training (woolf/protocol/proof.py, docs/protocol.md#proof-of-training)."""

    every: int = 0  # training steps between two links of a PR's chain (0: about 16 segments a run)
    segments: int = 1  # segments a validator audits in a drawn PR besides the final one (which binds the delta)
    deadline: float = 3600.0  # seconds a challenged participant has to serve the states an audit asks for


@dataclass
class TasksConfig:
    lease: float = 600.0  # seconds a reserved training task holds its shard without a heartbeat


@dataclass
class LedgerConfig:
    name: str = "ledger"
    merge: MergeConfig = field(default_factory=MergeConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    delta: DeltaConfig = field(default_factory=DeltaConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    forge: ForgeConfig = field(default_factory=ForgeConfig)
    signing: SigningConfig = field(default_factory=SigningConfig)
    validators: ValidatorsConfig = field(default_factory=ValidatorsConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    proof: ProofConfig = field(default_factory=ProofConfig)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)


SECTIONS = {
    "merge": MergeConfig,
    "policy": PolicyConfig,
    "workload": WorkloadConfig,
    "benchmark": BenchmarkConfig,
    "limits": LimitsConfig,
    "delta": DeltaConfig,
    "storage": StorageConfig,
    "forge": ForgeConfig,
    "signing": SigningConfig,
    "validators": ValidatorsConfig,
    "tasks": TasksConfig,
    "proof": ProofConfig,
    "scoring": ScoringConfig,
    "queue": QueueConfig,
}


def _build(cls, data: dict, where: str, source: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: [{where}] must be a table")
    kwargs = {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(
                f"{source}: unknown key '{where}.{key}'",
                hint=f"allowed keys in [{where}]: {', '.join(fields)}",
            )
        default = getattr(cls(), key)
        if dataclasses.is_dataclass(default):
            kwargs[key] = _build(type(default), value, f"{where}.{key}", source)
            continue
        kwargs[key] = _coerce(value, default, f"{where}.{key}", source)
    return cls(**kwargs)


def _coerce(value: Any, default: Any, name: str, source: str):
    expected = type(default)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        raise ConfigError(
            f"{source}: '{name}' must be a {expected.__name__}, got {value!r}",
        )
    return value


def parse_config(text: str, source: str = CONFIG_PATH) -> LedgerConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    top = dict(data)
    name = top.pop("name", "ledger")
    if not isinstance(name, str):
        raise ConfigError(f"{source}: 'name' must be a string, got {name!r}")
    kwargs: dict[str, Any] = {"name": name}
    for key, value in top.items():
        if key not in SECTIONS:
            raise ConfigError(
                f"{source}: unknown section or key '{key}'",
                hint=f"allowed: name, {', '.join('[' + s + ']' for s in SECTIONS)}",
            )
        kwargs[key] = _build(SECTIONS[key], value, key, source)
    cfg = LedgerConfig(**kwargs)
    check_config(cfg, source)
    return cfg


def load_config(path: Path) -> LedgerConfig:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing", hint="is this a ledger? run `woolf init`") from None
    return parse_config(text, str(path))
