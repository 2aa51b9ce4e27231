"""A proof's challenges and answers as both roles read and write them (over the forge's refs).

Usage:
    c = my_challenge(ledger, forge, pr, "v1", segments=[3, 15])    # the validator's own, or None
    c = issue_challenge(ledger, forge, pr, "v1", [3, 15], deadline_seconds=3600, ends=False)
    open_ = challenges(ledger, forge, pr)                          # {validator: Challenge} to answer
    answers = answers_to(ledger, forge, pr, c)                     # [Answer] oldest first, signer checked
    post_answer(ledger, forge, pr, c.commit, {3: StatePin(...), 15: ...})

Every commit is read as attacker-written (woolf/protocol/challenge.py parses it). On a signed ledger a
challenge counts only when signed by the validator key of the name it carries, and an answer to a PR
its contributor's own key signed only when signed by that key: the hub's hook refuses the others
(woolf/protocol/rules/proof.py), and readers check again. A keyless PR's answers count on content.
"""

from __future__ import annotations

import time

from woolf.protocol.challenge import (
    Answer,
    Challenge,
    answer_message,
    challenge_message,
    parse_answer,
    parse_challenge,
)
from woolf.protocol.rules.flood import signed_by_own_key
from woolf.protocol.signatures import role_problem, signatures
from woolf.protocol.signers import Signers, signers_text

MAIN = "refs/remotes/origin/main"


def _signers(ledger):
    return signers_text(ledger.git, ledger.git.rev_parse(MAIN) or ledger.git.rev_parse("HEAD"))


def challenges(ledger, forge, pr) -> dict[str, Challenge]:
    """Each validator's latest well-formed challenge on ``pr`` (signed by its key, on a signed ledger)."""
    text = _signers(ledger)
    out: dict[str, Challenge] = {}
    for name, chain in forge.challenges(pr).items():
        found = signatures(ledger.git, {c: text for c, _ in chain}) if text is not None else {}
        signers = Signers.parse(text.decode(errors="replace")) if text is not None else None
        for commit, message in chain:
            c, _ = parse_challenge(message, pr.id, commit)
            if c is None or c.validator != name:
                continue
            if signers is not None and (role_problem(found.get(commit), signers, "validator")
                                        or found[commit][1] != name):
                continue
            out[name] = c
    return out


def my_challenge(ledger, forge, pr, name: str, segments: list[int]) -> Challenge | None:
    """This validator's latest challenge on ``pr`` that asks for exactly ``segments`` (its own draw)."""
    c = challenges(ledger, forge, pr).get(name)
    return c if c is not None and list(c.segments) == sorted(segments) else None


def issue_challenge(ledger, forge, pr, name: str, segments: list[int], deadline_seconds: float,
                    ends: bool, key: str | None = None) -> Challenge:
    """Push this validator's challenge (signed when the clone signs); its deadline is its time + the seconds;
    ``key``: its public sealing key, for a private-data PR's samples (woolf/ledger/sealed.py)."""
    deadline = int(time.time() + deadline_seconds)
    commit = forge.push_challenge(pr, name, challenge_message(pr.id, name, segments, deadline, ends, key))
    return Challenge(pr.id, name, tuple(sorted(segments)), deadline, ends, commit, key)


def answers_to(ledger, forge, pr, challenge: Challenge) -> list[Answer]:
    """The well-formed answers to ``challenge``, oldest first; for a PR signed by its contributor's own key
    only those signed by that key."""
    found: list[Answer] = []
    chain = forge.answers(pr)
    text = _signers(ledger)
    keyed = text is not None and bool(signed_by_own_key(ledger.git, {pr.id: pr.head}, text))
    sigs = signatures(ledger.git, {c: text for c, _ in chain}) if keyed else {}
    who = pr.id.split("-", 1)[1].rsplit("-", 1)[0]
    for commit, message in chain:
        a, _ = parse_answer(message, pr.id, commit)
        if a is None or a.challenge != challenge.commit:
            continue
        if keyed and sigs.get(commit, ("N", ""))[:2] != ("G", who):
            continue  # answered by someone else: the hub refuses it; a reader never counts it
        found.append(a)
    return found


def answer_time(ledger, answer: Answer) -> int | None:
    """The answer's commit time: within the hook's skew of the hub's clock when it landed."""
    return ledger.git.commit_time(answer.commit)


def post_answer(ledger, forge, pr, challenge_commit: str, states: dict) -> str:
    """Push an answer naming the served states ({segment or "end:<segment>": StatePin}); its commit."""
    return forge.push_answer(pr, answer_message(pr.id, challenge_commit, states))
