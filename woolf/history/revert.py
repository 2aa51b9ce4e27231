"""Take back a merge: a PR whose delta is exactly what that merge applied, reversed.

Usage:
    pr = revert(ledger, 4, message="v4 broke poetry", contributor="carol")
    pr["id"], pr["reverts"]            # a normal PR on origin's current main, judged like any other

The delta is parent(V) − V per tensor (float32 arithmetic, in the model's
dtype): the weights change version V made, whatever rule and attenuation made
it. It is submitted on origin's newest version through the ordinary submit
path (woolf/ledger/submission.py::submit_delta) with ``reverts`` in submission.json
and a ``Woolf-Reverts`` trailer; validators check staleness, the gate and
the rest as for any PR, and a merge of it carries ``Woolf-Reverts: V``. On the
newest version under the `attenuated` rule with alpha 1, the merge gives V's
parent back to within float32 rounding; under a momentum rule it cannot be
exact, and `woolf diff NEW PARENT` says how far it is.
"""

from __future__ import annotations

from woolf.core.merge import compute_delta
from woolf.errors import UsageError
from woolf.forges import forge_for
from woolf.ledger.submission import SubmitDeltaOptions, submit_delta
from woolf.protocol.contributor import contributor_id
from woolf.timing import Timer

ORIGIN_MAIN = "refs/remotes/origin/main"


def revert(ledger, number: int, message: str = "", contributor: str | None = None,
           forge: str | None = None) -> dict:
    who = contributor_id(contributor, ledger.git)
    ledger.fetch()
    head = ledger.head(ORIGIN_MAIN)
    target = ledger.show(number, ref=ORIGIN_MAIN)  # UnknownVersionError when it does not exist
    if number == 0:
        raise UsageError("version 0 is the genesis: there is no earlier version to go back to")
    if not target.submission:
        raise UsageError(f"version {number} is a change ({target.subject}), not a merge: it changed no weights",
                         hint="a config change is undone by another `woolf config set`")
    for v in ledger.log(limit=head.version - number, ref=ORIGIN_MAIN):
        if v.reverts == number:
            raise UsageError(f"version {number} was already reverted by version {v.version}",
                             hint=f"to restore it, revert version {v.version}")
    parent = ledger.show(number - 1, ref=ORIGIN_MAIN)
    timer = Timer()
    with timer("load"):
        before, after = ledger.load_weights(parent), ledger.load_weights(target)
    if set(before) != set(after) or any(before[k].shape != after[k].shape for k in before):
        raise UsageError(f"version {number}'s tensors differ from its parent's: a merge cannot be taken back")
    with timer("delta"):
        delta = compute_delta(before, after)  # parent − target: what the merge applied, reversed
    del before, after
    if all(not bool(t.any()) for t in delta.values()):
        raise UsageError(f"version {number} did not change the weights (a buffered merge): nothing to take back")
    text = message or f"revert version {number} ({target.contributor}, {target.submission})"
    result = submit_delta(ledger, delta, head, SubmitDeltaOptions(
        who=who, message=text, the_forge=forge_for(ledger, forge), timer=timer, reverts=target))
    result.pop("pointer"), result.pop("declared")
    return {**result, "reverts": {"version": number, "commit": target.commit,
                                  "contributor": target.contributor, "submission": target.submission}}
