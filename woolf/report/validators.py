"""`woolf validators`: each validator's votes, agreement with the settled outcomes, median evaluation time.

Usage:
    report = validators_report(ledger)     # {"quorum", "validators": [...], "ignored": [...]}

Every vote commit on every PR's vote refs is read (a validator's ref is the chain
of its votes, newest first, down to the PR head) and verified against main's
allowed_signers; a vote that is malformed, about another PR, or signed by a key
that is not the named validator's (or no longer listed) is listed under
"ignored" with the reason. For each settled PR, a validator's vote on the round
that settled it (cast against the same main) agrees when it has the outcome's
decision and, for a merge, the merged weights' sha256 and a metric within
2·epsilon of the recorded one. A validator whose share of disagreeing votes is
above `validators.flag_rate` is flagged.
"""

from __future__ import annotations

from collections import defaultdict

from woolf.errors import ConfigError
from woolf.forges.local import LocalForge
from woolf.protocol import layout
from woolf.protocol.signers import Signers, signers_text
from woolf.protocol.tally import Ballot, agrees_with, median
from woolf.protocol.trailers import parse_message
from woolf.protocol.votes import parse_vote, verify_voters

MAX_VOTES_PER_REF = 1000  # a vote ref's chain read at most this deep


def _votes_of(git, pr, metric) -> tuple[list[Ballot], list[dict]]:
    prefix = f"{layout.PR_PREFIX}/{pr.id}/votes/"
    ballots, ignored = [], []
    for ref, (sha, typ) in sorted(git.refs_typed(prefix).items()):
        if typ != "commit":
            ignored.append({"ref": ref, "commit": sha, "reason": f"a {typ[:10]}, not a vote commit"})
            continue
        chain = git.out("rev-list", f"--max-count={MAX_VOTES_PER_REF}", sha, f"^{pr.head}").split()
        for commit in chain:
            b, why = parse_vote(git, commit, pr.id, metric)
            if b is None or b.validator != ref[len(prefix):]:
                ignored.append({"ref": ref, "commit": commit,
                                "reason": why or f"a vote by {b.validator} on another validator's ref"})
            else:
                ballots.append(b)
    return ballots, ignored


def _reference(git, pr, versions, metric) -> tuple[str | None, Ballot | None]:
    """(main the settling round was cast against, a ballot standing for the outcome), for a settled PR."""
    if pr.state == "merged":
        v = versions.get(pr.verdict_commit)
        if v is None or not v.parents:
            return None, None
        value = (v.metrics or {}).get(metric)
        value = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        return v.parents[0], Ballot("", "", "accept", v.weights_sha256, value)
    if pr.state == "rejected" and pr.verdict_commit:
        _, f = parse_message(git.message(pr.verdict_commit))
        return f.get("Woolf-Main"), Ballot("", "", "reject")
    return None, None


def validators_report(ledger) -> dict:
    if ledger.has_origin():
        ledger.fetch()
        ledger.main_ref = "refs/remotes/origin/main"
        ledger.reread_config()
    git, cfg = ledger.git, ledger.config
    q, metric = cfg.validators, cfg.policy.metric
    head = ledger.head(ledger.main_ref)
    text = signers_text(git, head.commit)
    versions = {v.commit: v for v in ledger.log(ref=ledger.main_ref)}
    stats: dict[str, dict] = defaultdict(lambda: {"votes": 0, "settled": 0, "agreed": 0, "seconds": []})
    if text is not None:
        try:
            for name in sorted(Signers.parse(text.decode(errors="replace")).names_with("validator")):
                stats[name]  # noqa: B018 - every listed validator appears, with or without votes
        except ConfigError:
            pass
    ignored: list[dict] = []
    for pr in LocalForge(git).list(local_only=True):
        ballots, bad = _votes_of(git, pr, metric)
        ignored += bad
        counted, unverified = verify_voters(git, ballots, text)
        ignored += [{"ref": f"{layout.PR_PREFIX}/{pr.id}/votes/", "commit": c, "reason": why} for c, why in unverified]
        main, outcome = _reference(git, pr, versions, metric)
        for b in counted:
            s = stats[b.validator]
            s["votes"] += 1
            if b.seconds is not None:
                s["seconds"].append(b.seconds)
        if outcome is None:
            continue
        latest: dict[str, Ballot] = {}
        for b in counted:  # newest first along each chain: keep each validator's first on that main
            if (main is None or b.main == main) and b.validator not in latest:
                latest[b.validator] = b
        for name, b in latest.items():
            stats[name]["settled"] += 1
            stats[name]["agreed"] += int(agrees_with(outcome, b, 2 * q.epsilon))
    rows = []
    for name, s in sorted(stats.items()):
        disagreed = s["settled"] - s["agreed"]
        rate = disagreed / s["settled"] if s["settled"] else None
        rows.append({"name": name, "votes": s["votes"], "settled": s["settled"], "agreed": s["agreed"],
                     "disagreed": disagreed, "disagreement_rate": rate,
                     "median_eval_seconds": median(s["seconds"]),
                     "flagged": rate is not None and rate > q.flag_rate})
    return {"quorum": q.quorum, "epsilon": q.epsilon, "flag_rate": q.flag_rate, "validators": rows,
            "ignored": ignored}

