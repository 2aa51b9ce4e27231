"""Identity is one thing: the contributor in a PR's id, in its submission.json and its signature.

Usage:
    check_submitter(ledger, pr, main)     # raises Rejected (the verdict's reason) when they disagree

A submission signed by a key in main's allowed_signers must be signed by the
contributor it names. `signing.contributors = "required"` in the config makes
such a signature mandatory; otherwise an unsigned submission (or one signed by
a key the ledger does not list) is judged on its content alone.
"""

from __future__ import annotations

from woolf.errors import Rejected
from woolf.protocol import layout
from woolf.protocol.signatures import signatures
from woolf.protocol.signers import signers_text


def contributor_in_id(sub_id: str) -> str | None:
    if not layout.SUBMISSION_ID.match(sub_id):
        return None
    return sub_id.split("-", 1)[1].rsplit("-", 1)[0]


def check_submitter(ledger, pr, main) -> None:
    who = contributor_in_id(pr.id)
    claimed = (pr.submission or {}).get("contributor")
    if not isinstance(claimed, str) or not layout.CONTRIBUTOR.match(claimed):
        return  # no readable submission.json or contributor: admission rejects it with the precise reason
    if who is None or claimed != who:
        raise Rejected(f"the PR id names contributor {who!r} but submission.json says {claimed!r}")
    text = signers_text(ledger.git, main.commit)
    required = ledger.config.signing.contributors == "required"
    if text is None:
        return  # unsigned ledger: no keys to check against
    status, principal = signatures(ledger.git, {pr.head: text}).get(pr.head, ("N", ""))
    if status == "G" and principal != who:
        raise Rejected(f"the submission is signed by {principal}'s key but claims to be from {who}")
    if status == "B":
        raise Rejected("the submission commit's signature does not verify")
    if required and status != "G":
        raise Rejected(f"this ledger requires submissions signed by the contributor's key; {who} has none "
                       "in ledger/allowed_signers or did not sign (git config user.signingkey)")
