"""Issue 14 on GitHub Actions: each validator's job applies its own verdict record as its signed vote.

A signed ledger on the local GitHub API server, two validator keys (v1, v2) and
`validators.quorum = 2`: what `ci/evaluate.sh` and `ci/merge.sh` do, per validator,
as `evaluate_pr` and `apply_record` calls.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from tests.conftest import git, key_for, signer_lines
from tests.crafting import craft_pr
from tests.e2e.test_github import github_ledger
from woolf.audit.recompute import audit
from woolf.errors import UsageError
from woolf.forges import forge_for
from woolf.forges.github import GitHubForge
from woolf.git.keys import configure
from woolf.git.repo import Git
from woolf.ledger.ledger import Ledger
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.protocol.signers import signers_text
from woolf.protocol.trailers import parse_message
from woolf.protocol.votes import read_votes
from woolf.validator import Validator
from woolf.validator.ci import apply_record, evaluate_pr


@pytest.fixture
def signed_world(tmp_path, monkeypatch, request):
    with github_ledger(tmp_path, monkeypatch, {"validators.quorum": "2", **getattr(request, "param", {})},
                       signing_key=key_for("work"), signer="work", extra_signers=signer_lines()) \
            as (gh, store, hub, fork):
        clones = {}
        for name in ("alice", "v1", "v2"):
            git("clone", "-q", str(hub), str(tmp_path / name), cwd=tmp_path)
            configure(Git(tmp_path / name), key_for(name))  # in CI: the environment's WOOLF_VALIDATOR_KEY
            clones[name] = Ledger.open(tmp_path / name)
        git("remote", "add", "fork", str(fork), cwd=tmp_path / "alice")
        (tmp_path / "alice" / ".dvc" / "config.local").write_text(
            f"['remote \"mine\"']\n    url = {tmp_path / 'alice-storage'}\n")

        def pr(message: str, seed: int) -> dict:
            train(clones["alice"], TrainOptions(steps=3, contributor="alice", seed=seed))
            return submit(clones["alice"], SubmitOptions(contributor="alice", delta_url_base=store.url, delta_remote="mine",
                          message=message))

        yield {"gh": gh, "hub": hub, "root": tmp_path, "pr": pr, **clones}
        assert gh.errors == [], "\n".join(gh.errors)


def _validator(world, name: str) -> Validator:
    """A fresh Validator per CI job: each job starts from a checkout, nothing carried over."""
    return Validator(Ledger.open(world[name].root), device="cpu", name=name, forge_kind="github")


def _record(world, name: str, number: int) -> dict:
    return json.loads(json.dumps(evaluate_pr(_validator(world, name), str(number))))  # as the artifact


def _main(world) -> str:
    return git("rev-parse", "main", cwd=world["hub"])


# nesterov: a rule with outer state, where the record hashes weights and state, and the vote the weights
@pytest.mark.parametrize("signed_world", [{}, {"merge.rule": "nesterov"}], indirect=True, ids=["plain", "state"])
def test_two_records_are_two_votes_and_one_merge(signed_world):
    w = signed_world
    sub = w["pr"]("good", seed=0)
    n, main0 = sub["number"], _main(w)
    r1, r2 = _record(w, "v1", n), _record(w, "v2", n)
    assert r1["accepted"] and r2["accepted"] and r1["candidate_sha256"] == r2["candidate_sha256"]
    # v2's record tampered with: metrics that fail the policy, or another candidate: refused, no vote
    worse = copy.deepcopy(r2)
    worse["metrics"]["after"] = {k: x + 100.0 for k, x in worse["metrics"]["before"].items()}
    with pytest.raises(UsageError, match="fail the ledger's policy"):
        apply_record(_validator(w, "v2"), worse)
    with pytest.raises(UsageError, match="candidate differs"):
        apply_record(_validator(w, "v2"), {**r2, "candidate_sha256": "0" * 64})
    # a job named v2 that holds v1's key (a secret in the wrong environment) casts nobody's vote
    wrong = Validator(Ledger.open(w["v1"].root), device="cpu", name="v2", forge_kind="github")
    with pytest.raises(UsageError, match="votes as v1"):
        apply_record(wrong, r2)
    # v1's record alone is one vote: no merge, the PR stays open, its vote shows on the PR
    first = apply_record(_validator(w, "v1"), r1)
    assert first.state == "voted" and not first.accepted and "waiting for 2 agreeing votes" in first.reason
    assert _main(w) == main0 and w["gh"].pulls["owner/ledger"][n]["closed"] is False
    head = w["gh"].pulls["owner/ledger"][n]["head_sha"]
    assert [(s["context"], s["state"]) for s in w["gh"].statuses[head]] == [("woolf/vote/v1", "success")]
    assert apply_record(_validator(w, "v1"), r1).state == "voted"  # a re-run casts no second vote
    # v2's record completes the quorum: one merge naming both votes
    done = apply_record(_validator(w, "v2"), r2)
    assert done.accepted and done.state == "merged" and done.version == 1
    git("clone", "-q", str(w["hub"]), str(w["root"] / "auditor"), cwd=w["root"])
    auditor = Ledger.open(w["root"] / "auditor")
    _, fields = parse_message(auditor.git.message(auditor.head().commit))
    hub = Git(w["hub"])  # a clone fetches no vote refs; the hub has them
    ballots, ignored = read_votes(hub, sub["id"], signers_text(hub, main0), "loss")
    assert ignored == [] and sorted(json.loads(fields["Woolf-Votes"])) == sorted(b.commit for b in ballots)
    assert {b.validator for b in ballots} == {"v1", "v2"}
    assert (fields.get("Woolf-State-Sha256") is not None) == (fields["Woolf-Rule"] == "nesterov")
    assert all(b.seconds and b.seconds > 0 for b in ballots)  # the records' evaluation time, for `woolf validators`
    contexts = [s["context"] for s in w["gh"].statuses[head]]
    assert contexts[:2] == ["woolf/vote/v1", "woolf/vote/v2"] and contexts[-1] == "woolf/validate"
    assert w["gh"].pulls["owner/ledger"][n]["labels"] == ["woolf:merged"]
    assert audit(auditor).ok
    assert apply_record(_validator(w, "v1"), r1) is None  # settled: a late job has nothing to do


def test_a_reject_record_and_an_accept_record_merge_nothing(signed_world, monkeypatch, capsys):
    from woolf.cli.main import main

    w = signed_world
    n, main0 = w["pr"]("split", seed=1)["number"], _main(w)
    r1 = _record(w, "v1", n)
    # a reject from v2's evaluation (a record may always say reject: it is that validator's opinion)
    r2 = {**_record(w, "v2", n), "accepted": False, "candidate_sha256": None, "reason": "v2 measured worse"}
    assert apply_record(_validator(w, "v1"), r1).state == "voted"
    # v2's vote job, as ci/merge.sh runs it: its name from WOOLF_VALIDATOR, the record from the artifact
    (w["root"] / "verdict.json").write_text(json.dumps(r2))
    monkeypatch.setenv("WOOLF_VALIDATOR", "v2")
    capsys.readouterr()
    assert main(["-C", str(w["v2"].root), "validate", "--forge", "github", "--apply",
                 str(w["root"] / "verdict.json"), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["state"] == "voted" and "voted reject" in second["reason"]
    assert _main(w) == main0 and w["gh"].pulls["owner/ledger"][n]["closed"] is False
    head = w["gh"].pulls["owner/ledger"][n]["head_sha"]
    assert [(s["context"], s["state"]) for s in w["gh"].statuses[head]] == [
        ("woolf/vote/v1", "success"), ("woolf/vote/v2", "failure")]


def test_two_jobs_voting_at_the_same_moment_still_settle(signed_world, monkeypatch):
    """Each job read the votes before the other's vote landed: the later one looks again after its push."""
    import woolf.validator.quorum as voter

    w = signed_world
    n = w["pr"]("at once", seed=2)["number"]
    r1, r2 = _record(w, "v1", n), _record(w, "v2", n)
    assert apply_record(_validator(w, "v2"), r2).state == "voted"
    real, calls = voter.read_votes, []

    def before_v2_landed(git, sub_id, text, metric):  # v1's first read saw no vote yet
        calls.append(sub_id)
        return ([], []) if len(calls) == 1 else real(git, sub_id, text, metric)

    monkeypatch.setattr(voter, "read_votes", before_v2_landed)
    done = apply_record(_validator(w, "v1"), r1)
    assert len(calls) == 2 and done.state == "merged" and done.version == 1
    assert w["gh"].pulls["owner/ledger"][n]["labels"] == ["woolf:merged"]


def test_a_pr_in_a_keyed_name_its_key_did_not_sign_is_nobodys_on_github(signed_world):
    """Issue 25 (breach 3) on the GitHub forge too: a PR in alice's name that alice's key did not sign
    is listed with no contributor, so junk opened in her name cannot cost her rating."""
    alice = signed_world["alice"]
    forge = GitHubForge(alice.git, alice.config.forge, fork_remote="fork", fork_owner="alice")
    zero = {k: torch.full_like(v, 1e-3) for k, v in alice.load_weights(alice.head()).items()}
    forged = craft_pr(alice, tensors=zero, forge=forge, remote="mine", who="alice", sign_key=False)
    own = signed_world["pr"]("hers", seed=1)["id"]
    validators_view = forge_for(Ledger.open(signed_world["v1"].root))
    assert {p.id: p.contributor for p in validators_view.list()} == {forged: None, own: "alice"}
    assert validators_view.get(forged).contributor is None
