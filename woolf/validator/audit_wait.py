"""A drawn PR's states, on demand: the validator's challenge, the participant's answer, and the wait between.

Usage (woolf/validator/audit_proof.py calls it for a drawn PR, before any weights are read):
    plan = states_for(ctx, adm, pr, segments, ends)   # Plan with every state checked; or raises Deferred
                                                      # (waiting), or Rejected (deadline missed, bad signed state)

The first look pushes this validator's challenge (woolf/ledger/challenges.py) and defers the PR: it
is neither rejected nor blocking, the queue goes on and the next pass looks again. An answer counts
when its states, fetched from storage (bounded: woolf/ledger/proof_states.py), digest to the committed
links (and carry their segments' fingerprints; the final one of a top-k PR its residual going in),
and its commit time is within the deadline. A PR its contributor's key signed is answered only by
that key (the hook and ledger/challenges.py see to it), so a bad state in its answer is a rejection
naming it; a keyless PR's answers may be anyone's, so garbage is skipped and named only if the
deadline passes. Past the deadline without a full answer: rejected, and the reason says so.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from dataclasses import dataclass, field

from safetensors.torch import load

from woolf.core.chain import digests
from woolf.errors import Rejected, StorageError
from woolf.git.keys import public_of
from woolf.ledger.challenges import answers_to, issue_challenge, my_challenge
from woolf.ledger.proof_states import BadState, fetch_blob, fetch_state, fits_link, state_bound
from woolf.ledger.replay import workload_for
from woolf.ledger.sealed import open_sealed, validator_key
from woolf.protocol import layout
from woolf.protocol.proof import segment_bounds, segment_digest
from woolf.protocol.rules.flood import signed_by_own_key
from woolf.protocol.signers import Signers, signers_text
from woolf.storage.weights import TRUSTED_LIMITS, read_spec
from woolf.validator.intake import Deferred

log = logging.getLogger("woolf.validator")


@dataclass
class Plan:
    """What a drawn PR's audit replays: its segments, and each state's pin once checked."""

    segments: list[int]
    ends: bool  # the end states were asked for too (another device class)
    pins: dict = field(default_factory=dict)  # {segment or "end:<segment>": StatePin}
    bound: tuple[int, int] = (0, 0)  # (most bytes, most tensors) of one state of this model
    challenge: object = None
    private: bool = False  # a private-data PR: each segment's samples come sealed to this validator


def challenger(ctx) -> str:
    """The name this validator challenges under: its key's name in allowed_signers (signed ledgers), else its
    own name made plain (lower-case letters, digits, . _ -)."""
    if getattr(ctx.state, "voter_name", None):
        return ctx.state.voter_name
    text = signers_text(ctx.ledger.git, ctx.ledger.git.rev_parse("refs/remotes/origin/main") or "HEAD")
    if text is not None and ctx.ledger.git.sign_key:
        key = public_of(ctx.ledger.git.sign_key).split()[1]
        name = next((s.name for s in Signers.parse(text.decode(errors="replace")).entries
                     if s.key == key and "validator" in s.roles), None)
        if name:
            return name
    plain = re.sub(r"[^a-z0-9_.-]", "-", ctx.name.lower()).strip("-._")[:39]
    return plain if layout.CONTRIBUTOR.match(plain) else "validator"


def _keys(plan: Plan) -> list:
    return [*plan.segments, *(f"end:{i}" for i in plan.segments if plan.ends),
            *(f"samples:{i}" for i in plan.segments if plan.private)]


def samples_of(ctx, adm, pin, i: int) -> dict:
    """A private-data PR's batches of segment ``i``, served sealed to this validator: fetched (bounded),
    opened, checked to fit the declared data (woolf workload's sample_data). BadState when they do not."""
    recipe = adm.meta["recipe"]
    first, last = segment_bounds(recipe["proof"], recipe["steps"], i)
    wl = workload_for(ctx.ledger, recipe)
    per_step = (getattr(wl, "batch_size", 1) or 1) * ((getattr(wl, "context", 0) or 0) + 9)
    blob = fetch_blob(ctx.ledger, pin, (last - first) * per_step + (1 << 16), f"segment {i}'s samples")
    try:
        samples = load(open_sealed(validator_key(ctx.ledger)[0], blob))
        wl.sample_data(int(recipe["data"]["bytes"]), samples)
    except Exception as exc:  # noqa: BLE001 - whatever a served blob makes the readers raise is its fault
        raise BadState(f"segment {i}'s samples are unusable ({' '.join(str(exc).split())[:160]})") from None
    if samples["positions"].shape[0] != last - first:
        raise BadState(f"segment {i}'s samples are not its {last - first} steps' batches")
    return samples


def _check(ctx, adm, plan: Plan, key, pin) -> None:
    """BadState unless ``pin``'s file is the committed state for ``key`` (remembered once checked)."""
    proof = adm.meta["recipe"]["proof"]
    memo = ctx.state.proofs.setdefault("checked", set())
    if isinstance(key, str) and key.startswith("samples:"):
        if (pin.sha256, key) not in memo:
            samples_of(ctx, adm, pin, int(key[len("samples:"):]))
            memo.add((pin.sha256, key))
        return
    end = isinstance(key, str)
    i = int(key[4:]) if end else key
    link = proof["links"][i + 1 if end else i][0]
    if (pin.sha256, link) in memo:
        return
    label = f"segment {i}'s {'end' if end else 'start'}"
    state, meta = fetch_state(ctx.ledger, pin, plan.bound, label)
    fits_link(state, link, label)
    if not end:
        fps = [f for f in (meta.get("fingerprints") or "").split(",") if f]
        if segment_digest(fps) != proof["links"][i + 1][1]:
            raise BadState(f"{label}'s file does not carry its segment's step fingerprints")
        if i == len(proof["links"]) - 2 and proof["end"].get("residual_in"):
            if digests(state, ("residual",))["residual"] != proof["end"]["residual_in"]:
                raise BadState(f"{label}'s file does not carry the residual its delta went out with")
    memo.add((pin.sha256, link))


def _gather(ctx, adm, pr, plan: Plan, challenge) -> list[str]:
    """Fill plan.pins from the answers in time; the problems of those that failed."""
    keyed = _keyed(ctx, pr)
    problems: list[str] = []
    for answer in answers_to(ctx.ledger, ctx.forge, pr, challenge):
        stamp = ctx.ledger.git.commit_time(answer.commit) or 0
        if stamp > challenge.deadline:
            problems.append("an answer came after the deadline")
            continue
        for key in _keys(plan):
            if key in plan.pins or key not in answer.states:
                continue
            try:
                _check(ctx, adm, plan, key, answer.states[key])
            except BadState as exc:
                if keyed:  # its contributor's own key served it: a bad state is the PR's
                    raise Rejected(f"retrain: {exc}") from None
                problems.append(str(exc))  # anyone may answer a keyless PR: skipped
                continue
            except StorageError as exc:  # not reachable now: the next pass looks again
                log.info("%s: a served state is not reachable now (%s)", adm.meta["id"], exc.message)
                continue
            plan.pins[key] = answer.states[key]
    return problems


def _keyed(ctx, pr) -> bool:
    text = signers_text(ctx.ledger.git, ctx.ledger.git.rev_parse("refs/remotes/origin/main") or "HEAD")
    return text is not None and bool(signed_by_own_key(ctx.ledger.git, {pr.id: pr.head}, text))


def _when(t: int) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def states_for(ctx, adm, pr, segments: list[int], ends: bool) -> Plan:
    """The checked states of ``segments`` of ``pr`` (their ends too with ``ends``). Raises Deferred while
    waiting for them, Rejected when the deadline passed or a signed answer served a bad one."""
    cfg = ctx.ledger.config
    spec = read_spec(ctx.ledger.weights_path(adm.base), TRUSTED_LIMITS, f"version {adm.base.version}")
    plan = Plan(list(segments), ends, bound=state_bound(spec, ranks=int(adm.meta["recipe"].get("nproc", 1))),
                private=adm.meta["recipe"]["data"]["kind"] == "private")
    name = challenger(ctx)
    challenge = my_challenge(ctx.ledger, ctx.forge, pr, name, segments)
    if challenge is None:
        key = validator_key(ctx.ledger)[1] if plan.private else None
        challenge = issue_challenge(ctx.ledger, ctx.forge, pr, name, segments, cfg.proof.deadline, ends, key)
        raise Deferred(f"{pr.id}: drawn for an audit; challenged for segments {segments} (answer by "
                       f"{_when(challenge.deadline)})")
    plan.challenge = challenge
    problems = _gather(ctx, adm, pr, plan, challenge)
    if all(k in plan.pins for k in _keys(plan)):
        return plan
    if time.time() <= challenge.deadline:
        raise Deferred(f"{pr.id}: waiting for the answer to its challenge (segments {segments}) until "
                       f"{_when(challenge.deadline)}")
    seen = f"; of the answers seen: {problems[0]}" if problems else "; no valid answer came"
    raise Rejected(f"retrain: its challenge (segments {', '.join(map(str, segments))}) was not answered by "
                   f"its deadline {_when(challenge.deadline)}{seen}")
