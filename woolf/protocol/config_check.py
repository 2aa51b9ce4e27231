"""The allowed values of every ledger config key (called by parse_config; standard library only,
since the hub's hook parses configs without site-packages).

Usage:
    check_config(cfg, "ledger/woolf.toml")      # ConfigError naming the key, its value and what is allowed
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import TYPE_CHECKING, Any

from woolf.errors import ConfigError
from woolf.protocol.compress_spec import KINDS, compress_kind, parse_spec

if TYPE_CHECKING:  # only for the annotation: config.py imports this module
    from woolf.protocol.config import LedgerConfig

STALENESS_KINDS = ("inverse", "polynomial", "hinge", "constant")
MERGE_RULES = ("attenuated", "nesterov", "delayed_nesterov", "fedbuff")  # see woolf/core/merge_rules.py
GATES = ("current", "best")
EVAL_MODES = ("sequential", "full")  # validators.eval (woolf/validator/paired.py)


def _nans(obj, prefix: str = ""):
    """Dotted names of every NaN in a config: TOML allows `nan`, and NaN passes every `x < 0` check."""
    for f in dataclasses.fields(obj):
        value, name = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from _nans(value, f"{name}.")
        elif isinstance(value, float) and math.isnan(value):
            yield name
        elif isinstance(value, dict):
            yield from (f"{name}.{k}" for k, v in value.items() if isinstance(v, float) and math.isnan(v))


def _value(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


# (key, is the value not allowed?, what is allowed), checked in this order; the first bad key is named
_KEYS = (
    ("merge.alpha_base", lambda x: not 0 < x <= 10, "use a number in (0, 10]"),
    ("merge.max_staleness", lambda x: x < 0, "use an integer >= 0"),
    ("merge.rule", lambda x: x not in MERGE_RULES, f"use one of {', '.join(MERGE_RULES)}"),
    ("merge.outer_lr", lambda x: not 0 < x <= 10, "use a number in (0, 10]"),
    ("merge.momentum", lambda x: not 0 <= x < 1, "use a number in [0, 1)"),
    ("merge.buffer", lambda x: not 1 <= x <= 1024, "use an integer in [1, 1024]"),
    ("policy.gate", lambda x: x not in GATES, f"use one of {', '.join(GATES)}"),
    ("policy.window", lambda x: not 1 <= x <= 10_000, "use an integer in [1, 10000]"),
    ("merge.staleness.kind", lambda x: x not in STALENESS_KINDS, f"use one of {', '.join(STALENESS_KINDS)}"),
    ("merge.staleness.a", lambda x: x < 0, "use a number >= 0"),
    ("merge.staleness.b", lambda x: x < 0, "use an integer >= 0"),
    ("policy.direction", lambda x: x not in ("minimize", "maximize"), "use 'minimize' or 'maximize'"),
    ("policy.metric", lambda x: not x, "name the metric the workload reports"),
    ("workload.steps", lambda x: x <= 0, "use an integer > 0"),
    ("workload.auto_seconds", lambda x: x <= 0, "use seconds > 0"),
    ("workload.follow_every", lambda x: x < 0, "use an integer >= 0 (0: do not follow)"),
    ("workload.max_steps", lambda x: x <= 0, "use an integer > 0"),
    *((f"limits.{name}", lambda x: x <= 0, "use an integer > 0")
      for name in ("max_delta_bytes", "max_header_bytes", "max_tensors", "max_delta_norm_ratio",
                   "max_lora_rank")),
    ("limits.max_lora_expand", lambda x: not x > 0, "use multiply-adds > 0, e.g. 5e11 (inf: no budget)"),
)
_AUTHOR = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")
_FORGE_KEYS = (
    ("forge.kind", lambda x: x not in ("local", "github"), "use 'local' or 'github'"),
    ("forge.delta_schemes", lambda x: not x or not all(s in ("https", "http") for s in x),
     "use a list drawn from 'https', 'http'"),
    ("forge.verdict_authors", lambda x: not all(isinstance(a, str) and _AUTHOR.fullmatch(a) for a in x),
     "use a list of GitHub logins (the validators' accounts)"),
    ("forge.delta_timeout", lambda x: x <= 0, "use seconds > 0"),
    ("signing.contributors", lambda x: x not in ("optional", "required"), "use 'optional' or 'required'"),
    ("validators.quorum", lambda x: not 1 <= x <= 64, "use an integer in [1, 64]"),
)


def _check_keys(cfg: LedgerConfig, keys, bad) -> None:
    for name, not_allowed, allowed in keys:
        value = _value(cfg, name)
        if not_allowed(value):
            bad(name, allowed, value)


def check_config(cfg: LedgerConfig, source: str) -> None:
    """Raise ConfigError naming the first key whose value is not allowed."""
    def bad(name: str, allowed: str, value: Any):
        raise ConfigError(f"{source}: '{name}' = {value!r} is not allowed; {allowed}")

    _check_keys(cfg, _KEYS, bad)
    _check_delta(cfg, bad)
    f = cfg.forge
    if f.kind == "github" and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", f.repo):  # a bad kind: below
        bad("forge.repo", "use 'owner/name' of the ledger's repository", f.repo)
    _check_keys(cfg, _FORGE_KEYS, bad)
    v = cfg.validators
    if not 0 <= v.epsilon < 1e6 or v.vote_timeout <= 0 or not 0 <= v.flag_rate <= 1:
        bad("validators", "epsilon in [0, 1e6), vote_timeout > 0, flag_rate in [0, 1]", dataclasses.asdict(v))
    _check_retrain(cfg, bad)
    if not 1 <= cfg.tasks.lease <= 7 * 86400:
        bad("tasks.lease", "use seconds in [1, 604800]", cfg.tasks.lease)
    _check_scoring(cfg, bad)
    if not cfg.name or any(c in cfg.name for c in "\n\r"):
        bad("name", "use a one-line name", cfg.name)
    for name in _nans(cfg):  # last: a key's own check names its range where it already catches nan
        bad(name, "use a number (nan is no value of any key)", float("nan"))


def _check_delta(cfg: LedgerConfig, bad) -> None:
    d = cfg.delta
    if not d.accept or not all(isinstance(k, str) and k in KINDS for k in d.accept):
        bad("delta.accept", f"use a non-empty list drawn from {', '.join(KINDS)}", d.accept)
    try:
        spec = parse_spec(d.compress)
    except ValueError as exc:
        bad("delta.compress", f"use 'dense' or 'topk:0.02,bits:2[,chunk:256]' ({exc})", d.compress)
    if compress_kind(spec) not in d.accept:
        bad("delta.compress", f"use a kind in delta.accept ({', '.join(d.accept)})", d.compress)
    if not 1 <= cfg.storage.snapshot_every <= 1_000_000:
        bad("storage.snapshot_every", "use an integer in [1, 1000000]", cfg.storage.snapshot_every)


def _check_scoring(cfg: LedgerConfig, bad) -> None:
    s, q, p = cfg.scoring, cfg.queue, cfg.policy
    if not 64 <= s.sample_bytes <= 64 * 1024**2:
        bad("scoring.sample_bytes", "use an integer in [64, 67108864]", s.sample_bytes)
    if s.uniqueness not in ("mark", "reject", "off"):
        bad("scoring.uniqueness", "use 'mark', 'reject' or 'off'", s.uniqueness)
    if not 0 < s.copy_threshold <= 1:
        bad("scoring.copy_threshold", "use a number in (0, 1]", s.copy_threshold)
    if not 0 <= s.copy_window <= 1024:
        bad("scoring.copy_window", "use an integer in [0, 1024]", s.copy_window)
    if s.norm_multiple < 0 or not 3 <= s.norm_window <= 1024:
        bad("scoring.norm_multiple/norm_window", "use a multiple >= 0 and a window in [3, 1024]",
            (s.norm_multiple, s.norm_window))
    if s.norm_action not in ("reject", "clip"):
        bad("scoring.norm_action", "use 'reject' or 'clip'", s.norm_action)
    if s.min_effect < 0:
        bad("scoring.min_effect", "use a number >= 0", s.min_effect)
    if q.max_open_per_contributor < 1:
        bad("queue.max_open_per_contributor", "use an integer >= 1", q.max_open_per_contributor)
    hb = cfg.benchmark
    if hb.hidden_sha256 and (not re.fullmatch(r"[0-9a-f]{64}", hb.hidden_sha256) or hb.hidden_size <= 0):
        bad("benchmark.hidden_sha256/hidden_size", "use a lower-case hex sha256 and its size in bytes (> 0)",
            (hb.hidden_sha256, hb.hidden_size))
    if p.max_drawdown < 0 and p.max_drawdown != -1:
        bad("policy.max_drawdown", "use a number >= 0 (0: off), or -1 (twice the tolerated regression)",
            p.max_drawdown)
    if not 0 <= cfg.limits.min_delta_norm_ratio < cfg.limits.max_delta_norm_ratio:
        bad("limits.min_delta_norm_ratio", "use a number >= 0 below max_delta_norm_ratio",
            cfg.limits.min_delta_norm_ratio)


def _check_retrain(cfg: LedgerConfig, bad) -> None:
    """Re-training's keys (woolf/validator/retrain.py)."""
    v, lim = cfg.validators, cfg.limits
    if not 0 <= v.retrain_rate <= 1:
        bad("validators.retrain_rate", "use a share in [0, 1]", v.retrain_rate)
    if not 0 < v.retrain_tolerance < 1e6:
        bad("validators.retrain_tolerance", "use a relative distance > 0", v.retrain_tolerance)
    if v.eval not in EVAL_MODES:
        bad("validators.eval", f"use one of {', '.join(EVAL_MODES)}", v.eval)
    if not 0.5 <= v.confidence < 1:
        bad("validators.confidence", "use a probability in [0.5, 1)", v.confidence)
    if lim.max_batch <= 0:
        bad("limits.max_batch", "use an integer > 0", lim.max_batch)
    if not 0 < lim.max_retrain_seconds <= 7 * 86400:
        bad("limits.max_retrain_seconds", "use seconds in (0, 604800]", lim.max_retrain_seconds)
    p = cfg.proof
    if not 0 <= p.every <= 1_000_000:
        bad("proof.every", "use an integer in [0, 1000000] (0: about 16 segments a run)", p.every)
    if not 0 <= p.segments <= 126:
        bad("proof.segments", "use an integer in [0, 126]", p.segments)
    if not 0 < p.deadline <= 7 * 86400:
        bad("proof.deadline", "use seconds in (0, 604800]", p.deadline)
