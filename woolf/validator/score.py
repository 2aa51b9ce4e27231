"""A delta's contribution scores (Gauntlet): the loss it removes on its assigned shard and on a random one.

Usage (the "score" and "effect" stages, validator/stages.py, over the validator's context):
    cand.scores = score_delta(ctx, adm, main, current, delta)
    reason = judge_scores(ledger.config, cand)             # before the benchmark: learned nothing, not unique
    reason = effect_reason(ledger.config, cand, before, probe)   # after the gate: changes nothing measurable
    fields = verdict_fields(verdict, ledger.config)        # Woolf-Scores, Woolf-Flags, ... trailers

Nothing here keeps state between PRs (the validator's is woolf/validator/state.py).
``cand``: the candidate record (validator/candidate.py); anything with ``scores`` and ``flags``.

The assigned shard is the workload's default data for (contributor, base version), the
data the participant was given; the random shards (RANDOM_SHARDS of them) are the same
function of names no contributor can have. Each is measured on `scoring.sample_bytes`
bytes, on the base version's weights before and after adding the raw delta (scale 1: the
delta's own effect, whatever the merge rule makes of it).

Which bytes are scored and which shards are "random" is drawn from score_seed: the commit of
the main version the PR is judged against, salted with the validators' hidden benchmark when
the ledger pins one. A submitter chooses its PR id, but not main's next commit, and never
holds the salt: it cannot train on the scored sample nor pick a random shard that flatters it.
The seed is recorded in Woolf-Scores (revealed after the verdict, one seed per main version).
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import time

import torch

from woolf.core.merge import apply_delta
from woolf.core.scores import LEARNED_NOTHING, improvement, unique
from woolf.errors import IntegrityError, Rejected, StorageError, WoolfError
from woolf.ledger.benchmark import benchmark_label, hidden_benchmark
from woolf.validator.seqscore import sequential_scores
from woolf.validator.windows import sequential, tokens_of

log = logging.getLogger("woolf.validator")


RANDOM_SHARDS = 2  # random shards each delta is compared with: their spread is the score's own noise


def score_seed(ledger, main) -> str:
    """What a PR's scored sample and random shards are drawn from: main's commit it is judged against (no
    submitter chooses it; in a moving queue none can know it), salted with the hidden benchmark's bytes
    when the ledger pins one (then no submitter can compute it at all). Every validator draws alike."""
    h = hashlib.sha256(b"woolf-scoring\0" + main.commit.encode())
    if ledger.config.benchmark.hidden_sha256:
        h.update(hashlib.sha256(b"woolf-scoring-salt\0" + hidden_benchmark(ledger.config)).digest())
    return h.hexdigest()


def sample(texts: list[bytes], size: int, seed: str) -> bytes:
    """``size`` bytes of the joined texts: 8 pieces, one in each eighth at a place drawn from ``seed``
    (all of it when shorter)."""
    joined = b"\n".join(texts)
    if len(joined) <= size:
        return joined
    piece, part = size // 8, len(joined) // 8
    rng = random.Random(hashlib.sha256(f"woolf-sample:{seed}".encode()).digest())
    starts = [i * part + rng.randrange(max(1, part - piece + 1)) for i in range(8)]
    return b"".join(joined[s:s + piece] for s in starts)


def random_name(seed: str, index: int = 0) -> str:
    return f"~random:{seed[:16]}:{index}"  # '~' and ':' are not in any contributor id


def _base_weights(ledger, adm, main, current):
    """The PR's base version's weights (main's when it is not stale); read per PR, never kept in memory.

    Weights that storage does not serve or that fail their recorded hash (anyone who may write
    storage can overwrite an old version's object) reject this PR with the reason; they never
    stop the pass. The bad copy is not kept (Ledger.weights_path unlinks it): every later read
    fetches and checks again."""
    if adm.base.commit == main.commit:
        return current
    try:
        return ledger.load_weights(adm.base)
    except (IntegrityError, StorageError) as exc:
        raise Rejected(base_unreadable(adm.base.version, exc)) from None


BASE_UNREADABLE = "weights of its base version"


def base_unreadable(version: int, exc: WoolfError) -> str:
    """The reason a PR is rejected when its base version's weights cannot be read (also: a revert's)."""
    kind = "unavailable" if isinstance(exc, StorageError) else "fail their recorded hash"
    return (f"the {BASE_UNREADABLE} {version} {kind} in storage ({exc.message[:200]}); it cannot be "
            "scored against them: train on the current version and submit again")


def _after(base: dict, delta: dict, reuse: bool) -> dict:
    """base + delta, as apply_delta(base, delta, 1.0) computes it; with ``reuse`` a float32 base's own
    memory receives it (the same bits: times 1.0 is exact, IEEE addition commutes), so scoring
    holds no third model."""
    dtype_of = getattr(delta, "dtype_of", lambda k: delta[k].dtype)  # a lazy delta's from its header (storage/lazy.py)
    if reuse and all(v.dtype == torch.float32 and dtype_of(k) == torch.float32 and v.is_contiguous()
                     for k, v in base.items()):
        for k in sorted(base):
            torch.add(base[k], delta[k], out=base[k])
        return base
    return apply_delta(base, delta, 1.0)


def score_delta(ctx, adm, main, current, delta, spent: list | None = None) -> dict | None:
    """{"assigned", "random" (their mean), "randoms", "difference", "seed", "seconds"}; None when scoring is
    off or the workload has no shards. A delta under `scoring.min_assigned` on its own shard is refused by
    that alone (judge_scores): its random shards' "after" is not evaluated, no "random".

    ``spent`` (a list): scoring may write base + delta into ``current``'s memory, and appends
    "current" to it when it did; the caller reads main's weights again before it uses them."""
    ledger, device = ctx.ledger, ctx.device
    cfg = ledger.config
    if not cfg.scoring.enabled:
        return None
    wl = ledger.workload()
    t0 = time.perf_counter()
    metric, direction = cfg.policy.metric, cfg.policy.direction
    seed = score_seed(ledger, main)  # a StorageError (no hidden benchmark here) is the validator's own problem
    try:
        version, size = adm.base.version, cfg.scoring.sample_bytes
        shards = [sample(wl.default_data(adm.meta["contributor"], version).texts, size, seed)]
        shards += [sample(wl.default_data(random_name(seed, j), version).texts, size, f"{seed}:{j}")
                   for j in range(RANDOM_SHARDS)]
        base = _base_weights(ledger, adm, main, current)
        if sequential(ctx):  # a few windows at a time, base kept beside base + delta (seqscore.py)
            out = sequential_scores(ctx, shards, base, adm.base.commit, apply_delta(base, delta, 1.0), seed)
            return {**out, "seed": seed[:32], "seconds": round(time.perf_counter() - t0, 4)}
        # every "before" first: base's memory may then receive base + delta (see _after)
        before = [float(wl.evaluate(base, data, device).get(metric)) for data in shards]
        reuse = base is not current or spent is not None
        after = _after(base, delta, reuse)
        if after is current and spent is not None:
            spent.append("current")
        got = []
        for b, data in zip(before, shards, strict=True):
            a = wl.evaluate(after, data, device).get(metric)
            got.append(improvement(b, float(a), direction))
            floor = cfg.scoring.min_assigned
            if len(got) == 1 and math.isfinite(floor) and not got[0] >= floor:  # learned nothing: refused on this alone
                return {"assigned": got[0] if math.isfinite(got[0]) else -1e9, "seed": seed[:32],
                        "seconds": round(time.perf_counter() - t0, 4), **tokens_of(wl, shards[:1])}
        del after, base
    except WoolfError:
        raise  # a Rejected (base weights unreadable) or the ledger's own failure
    except Exception as exc:  # noqa: BLE001 - a workload without shards, or data too short: no scores
        log.info("%s: no contribution scores (%s: %s)", adm.meta["id"], type(exc).__name__, str(exc)[:200])
        return None
    got = [x if math.isfinite(x) else -1e9 for x in got]
    randoms = got[1:]
    out = {"assigned": got[0], "random": sum(randoms) / len(randoms), "randoms": randoms}
    out["difference"] = out["assigned"] - out["random"]
    out["seed"] = seed[:32]
    out["seconds"] = round(time.perf_counter() - t0, 4)
    return {**out, **tokens_of(wl, shards)}


def _metric(d: dict | None, metric: str) -> float | None:
    x = (d or {}).get(metric)
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def effect_reason(cfg, cand, before: dict, probe: dict) -> str | None:
    """After the benchmark gate accepted: a delta that changes nothing measurable (the drawdown's bound
    follows: woolf/validator/drawdown.py)."""
    s = cand.scores
    b, a = _metric(before, cfg.policy.metric), _metric(probe, cfg.policy.metric)
    measured = s and "revert" not in cand.flags and b is not None and a is not None
    if measured and abs(s["assigned"]) < cfg.scoring.min_effect and abs(b - a) < cfg.scoring.min_effect:
        return (f"the delta changes nothing measurable (benchmark {b - a:+.2g}, its shard {s['assigned']:+.2g}, "
                f"under scoring.min_effect {cfg.scoring.min_effect:g})")
    return None


def judge_scores(cfg, cand) -> str | None:
    """Before the benchmark is evaluated (so a refused delta costs no benchmark evaluation): a delta
    that learned nothing from its own shard; one that did not train on it (uniqueness = reject, or a mark)."""
    s = cand.scores
    if "revert" in cand.flags:  # a verified revert trained on nothing: it takes back a merge
        return None
    if s and s["assigned"] < cfg.scoring.min_assigned:
        return (f"{LEARNED_NOTHING} {s['assigned']:+.4f} of loss on its own assigned shard, under "
                f"scoring.min_assigned {cfg.scoring.min_assigned:g}: it did not learn the data it was given")
    if s and cfg.scoring.uniqueness != "off" and not unique(s["assigned"], s["random"]):
        why = (f"random data improved as much as its assigned shard (assigned {s['assigned']:+.4f}, "
               f"random {s['random']:+.4f}): it did not train on what it was given")
        if cfg.scoring.uniqueness == "reject":
            return why
        cand.flags.append("not-unique")
    return None


def verdict_fields(verdict, cfg=None) -> dict:
    """The scoring trailers of a verdict, merged or rejected (absent values are not written)."""
    return {"Woolf-Benchmark": benchmark_label(cfg) if cfg is not None else None,
            "Woolf-Scores": verdict.scores or None, "Woolf-Flags": verdict.flags or None,
            "Woolf-Delta-Content": verdict.content, "Woolf-Delta-Norm": verdict.delta_norm,
            "Woolf-Delta-Clip": verdict.clip}
