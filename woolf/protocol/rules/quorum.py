"""Does a version commit (or a rejection) rest on a quorum of signed votes? Used by the hub's rules,
validators before building on main (through woolf/protocol/rules/main.py) and `woolf audit`.

Usage:
    problem = version_quorum_problem(git, commit, parents, fields)     # None when it holds
    problem = rejection_quorum_problem(git, sub_id, fields, main)      # None when it holds
    problem = expiry_problem(git, sub_id, fields, verdict, main, now, tips)  # the hub, for `expired` verdicts
    problem = expiry_votes_problem(git, sub_id, fields, verdict, main)   # the audit (no hub clock)

With `validators.quorum = k > 1` in the config in force (the version's first
parent's), a merge names its votes in `Woolf-Votes` (a JSON list of vote commit
ids): at least k of them, each a vote on this PR cast against the version's
first parent and signed by a distinct validator in the allowed_signers before
it, must agree (woolf/protocol/tally.py) on accepting exactly the weights the
version records, and the version's recorded metric must lie within
2·epsilon of their median. A rejection names k agreeing reject votes. With
k = 1 nothing is required (one validator decides, as before quorums).
"""

from __future__ import annotations

import math
import re

from woolf.errors import ConfigError, WoolfError
from woolf.protocol import layout
from woolf.protocol.config import parse_config
from woolf.protocol.rules.tasks import MAX_SKEW
from woolf.protocol.signers import signers_text
from woolf.protocol.tally import median, tally
from woolf.protocol.trailers import json_field
from woolf.protocol.votes import parse_vote, verify_voters

MAX_NAMED = 64
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


_SETTINGS: dict[str, tuple] = {}  # commit id -> (validators, metric): a commit id names its config


def settings_at(git, commit: str | None):
    """(quorum config, policy metric) of the config committed at ``commit``; remembered per commit id
    for the process (the hook checks every verdict of a push against the same main).

    Fails closed: a config that cannot be read or parsed raises WoolfError (its
    quorum is unknown, so nothing resting on it is accepted); defaults never stand in.
    """
    if commit in _SETTINGS:
        return _SETTINGS[commit]
    raw = git.show_bytes(f"{commit}:{layout.CONFIG}", max_bytes=1 << 20) if commit else None
    if raw is None:
        raise ConfigError(f"no {layout.CONFIG} at {str(commit)[:12]}: its validators.quorum is unknown")
    cfg = parse_config(raw.decode(errors="replace"))
    if _HEX40.match(commit):
        if len(_SETTINGS) > 1024:
            _SETTINGS.clear()
        _SETTINGS[commit] = (cfg.validators, cfg.policy.metric)
    return cfg.validators, cfg.policy.metric


def _settings_or_problem(git, commit: str | None):
    try:
        return settings_at(git, commit), None
    except WoolfError as exc:
        return (None, None), f"the config it rests on cannot be read, so the quorum is unknown: {exc.message}"


def _in_force(git, commit: str | None, fields: dict):
    """(quorum settings, metric, named vote shas, problem) for a verdict resting on ``commit``'s config."""
    (settings, metric), problem = _settings_or_problem(git, commit)
    shas, bad = (None, None) if problem else named_votes(fields)
    return settings, metric, shas, problem or bad


def named_votes(fields: dict) -> tuple[list[str] | None, str | None]:
    raw = fields.get("Woolf-Votes")
    if raw is None:
        return None, None
    shas = json_field(fields, "Woolf-Votes")  # bounded: size and nesting (protocol/trailers.py)
    if shas is None:
        return None, "Woolf-Votes is not a JSON list"
    if not isinstance(shas, list) or len(shas) > MAX_NAMED or not all(
            isinstance(s, str) and _HEX40.match(s) for s in shas):
        return None, f"Woolf-Votes must be a list of at most {MAX_NAMED} commit ids"
    return list(dict.fromkeys(shas)), None


def _outcome(git, sub_id, shas, text, settings, metric, main=None):
    ballots, why = [], []
    for sha in shas:
        b, problem = parse_vote(git, sha, sub_id, metric)
        if b is None:
            why.append(f"{sha[:12]}: {problem}")
        elif main is not None and b.main != main:
            why.append(f"{sha[:12]}: cast against {b.main[:12]}, not the version's parent")
        else:
            ballots.append(b)
    good, bad = verify_voters(git, ballots, text)
    why += [f"{c[:12]}: {p}" for c, p in bad]
    return tally(good, settings.quorum, settings.epsilon), why


def version_quorum_problem(git, commit: str, parents: list[str], fields: dict) -> str | None:
    parent = parents[0] if parents else None
    settings, metric, shas, problem = _in_force(git, parent, fields)
    if problem or settings.quorum <= 1:
        return problem
    if not shas:
        return f"a merge without votes on a ledger with validators.quorum = {settings.quorum}"
    sub_id = fields.get("Woolf-Submission", "")
    out, why = _outcome(git, sub_id, shas, signers_text(git, parent), settings, metric, main=parent)
    detail = f" ({'; '.join(why)[:400]})" if why else ""
    if out.state != "merged":
        return f"names {len(shas)} vote(s) that are no quorum of {settings.quorum} to accept{detail}"
    if out.candidate != fields.get("Woolf-Weights-Sha256"):
        return "its weights are not the candidate its quorum of votes accepted"
    after = json_field(fields, "Woolf-Metrics-After")
    value = after.get(metric) if isinstance(after, dict) else None
    mid = median([b.metric for b in out.votes if b.metric is not None])
    if mid is not None and not (isinstance(value, (int, float)) and math.isfinite(value)
                                and abs(value - mid) <= 2 * settings.epsilon):
        return f"records {metric} {value}, but its votes measured {mid} (median)"
    return None


def rejection_quorum_problem(git, sub_id: str, fields: dict, main: str | None) -> str | None:
    """A `rejected` verdict on a quorum ledger names k agreeing reject votes (keys on ``main``), all cast
    against the main its Woolf-Main names, a version on ``main``'s chain."""
    settings, metric, shas, problem = _in_force(git, main, fields)
    if problem or settings.quorum <= 1:
        return problem
    against = fields.get("Woolf-Main") or ""
    if not _HEX40.match(against) or not (main and git.is_ancestor(against, main)):
        return "a rejection under a quorum names the main on main's chain its votes were cast against (Woolf-Main)"
    # votes cast against another (earlier) main judged another candidate: they count for no rejection now
    out, why = _outcome(git, sub_id, shas or [], signers_text(git, main), settings, metric, main=against)
    if out.state != "rejected":
        detail = f" ({'; '.join(why)[:400]})" if why else ""
        return f"a rejection without a quorum of {settings.quorum} reject votes{detail}"
    return None


def expiry_votes_problem(git, sub_id: str, fields: dict, verdict: str, main: str | None) -> str | None:
    """What the audit can check of an `expired` verdict without the hub's clock: it names votes on this
    PR by at least `validators.quorum` = k > 1 distinct validators (keys on ``main``) whose votes really
    failed to agree (their tally is pending), and it is committed at least `validators.vote_timeout`
    after the first of them (vote commit times are bounded by the hub's clock when each vote lands,
    woolf/protocol/rules/push.py). Fewer validators than a quorum could forge an expiry alone: refused."""
    (settings, metric), unreadable = _settings_or_problem(git, main)
    if unreadable:
        return unreadable
    shas, bad = named_votes(fields)
    if bad or not shas:
        return bad or "an expiry names the votes that did not reach quorum (Woolf-Votes)"
    ballots = [parse_vote(git, sha, sub_id, metric)[0] for sha in shas]
    if any(b is None for b in ballots):
        return "an expiry names commits that are no votes on this PR"
    if settings.quorum <= 1:
        return "a ledger with validators.quorum = 1 settles every PR by one verdict; nothing expires"
    good, wrong = verify_voters(git, ballots, signers_text(git, main))
    if wrong:
        return f"an expiry names votes that do not count ({'; '.join(f'{c[:12]}: {p}' for c, p in wrong)[:300]})"
    voters = sorted({b.validator for b in good})
    if len(voters) < settings.quorum:
        return (f"an expiry names votes of {len(voters)} validator(s) ({', '.join(voters)[:200]}); it needs "
                f"{settings.quorum} validators whose votes failed to agree (fewer could forge it alone)")
    if tally(good, settings.quorum, settings.epsilon).state != "pending":
        return "the votes it names agree on an outcome: the PR is settled by them, not expired"
    times = [int(t) for t in git.out("log", "--no-walk=unsorted", "--format=%ct", verdict, *shas).split()]
    if times[0] - min(times[1:]) < settings.vote_timeout:
        return (f"expired {times[0] - min(times[1:])} s after the first vote; "
                f"validators.vote_timeout is {settings.vote_timeout:g} s")
    return None


def expiry_problem(git, sub_id: str, fields: dict, verdict: str, main: str | None, now: float,
                   tips: list[str] | None = None) -> str | None:
    """The hub's check of an `expired` verdict: expiry_votes_problem, its own commit time within MAX_SKEW
    of the hub's clock, and (``tips``: the latest vote of every validator on the PR, as the hub holds
    them) every validator's latest vote named, so an agreeing quorum cannot be left out."""
    stamp = git.commit_time(verdict)
    if stamp is None or abs(stamp - now) > MAX_SKEW:
        return f"its commit time is {stamp - now if stamp is not None else 0:+.0f} s off the hub's clock"
    shas = set(named_votes(fields)[0] or [])
    left_out = [t for t in (tips or []) if t not in shas]
    if left_out:
        return f"an expiry names every validator's latest vote on the PR; it leaves out {left_out[0][:12]}"
    return expiry_votes_problem(git, sub_id, fields, verdict, main)
