"""Proof of training: validators audit drawn PRs by replaying committed segments of their chains.

Real ledgers, real training, real challenges and answers: an honest PR (fresh and carried optimizer
state) is challenged, answered and matches bit for bit; a chain with a faked segment is rejected naming
the first step that does not replay; a delta its chain does not end at is rejected; bad recipes, private
data under policy.require_retrain, a replay that crashes or runs past its time: each one verdict, and the
queue goes on. (The challenge and answer refs' bad inputs: test_audit_wait.py.)
"""

from __future__ import annotations

import json
from importlib import import_module

import torch
from safetensors.torch import load_file

from woolf.forges.local import LocalForge
from woolf.ledger.recipes import version_recipe
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.participant.proof import proof_root
from woolf.participant.prove import prove_once
from woolf.participant.state import work_dir
from woolf.protocol.trailers import json_field, parse_message
from woolf.report.board import credit, leaderboard
from woolf.storage.weights import save_atomic
from woolf.validator import Validator
from woolf.workloads.charlm import CharLM
from woolf.workloads.proof import Recorder

RETRAIN = {"validators.retrain_rate": "1", "policy.min_improvement": "-10"}
train_mod = import_module("woolf.participant.train")  # the module (woolf.participant.train is the function)


def _audit(val, *participants, name: str = "v1") -> list:
    """One pass (drawn PRs are challenged and wait), the participants answer, one more pass."""
    first = Validator(val, device="cpu", name=name).run()
    for p in participants:
        prove_once(p)
    return first + Validator(val, device="cpu", name=name).run()


def _rewrite_recipe(led, **changes) -> None:
    """Edit the recipe `train` left in .woolf/work/trained.json (what a dishonest participant would send)."""
    path = work_dir(led) / "trained.json"
    record = json.loads(path.read_text())
    for key, value in changes.items():
        record["recipe"][key] = value
    path.write_text(json.dumps(record))


def test_honest_prs_are_challenged_answered_and_replay_bit_for_bit(make_net):
    net = make_net(**RETRAIN)
    alice, val = net.clone("alice"), net.clone("val")
    for seed in (0, 1):  # the second starts from the optimizer state the first left: carried, never uploaded
        pr = net.train_submit(alice, "alice", seed=seed)
        assert Validator(val, device="cpu", name="v1").run() == []  # drawn: challenged, waiting, not rejected
        [v] = _audit(val, alice)
        assert v.state == "merged", v.reason
        r = v.retrain
        assert r["retrain"] == "matched" and r["class"] == "same" and r["of"] == 20 and r["steps"] >= 2
        assert r["segments"][-1] == 9 and len(r["segments"]) == 2  # the final segment, and one drawn
    val.fetch()
    shown = version_recipe(val, val.head("refs/remotes/origin/main"))  # what `woolf show` prints
    assert shown["retrain"]["retrain"] == "matched"
    recipe = shown["recipe"]
    assert recipe["optimizer"] == {"start": "carried"} and recipe["proof"]["start"]["carried"] != pr["id"]
    assert recipe["proof"]["start"]["carried"] and recipe["proof"]["end"]["delta"] == pr["delta_sha256"]
    assert len(recipe["proof"]["links"]) == 11 and recipe["proof"]["every"] == 2
    assert not (proof_root(alice) / pr["id"]).exists() or prove_once(alice) == []  # settled: its states go
    assert not (proof_root(alice) / pr["id"]).exists()


class _Faker(Recorder):
    """Skips the work of segment 1: after committing to link 1, it jumps the weights elsewhere."""

    def _link(self, i: int) -> None:
        super()._link(i)
        if i == 1:
            with torch.no_grad():
                for p in self.params.values():
                    p.add_(1e-3)


def test_a_faked_segment_is_named_at_its_first_step_and_flagged(make_net, monkeypatch):
    net = make_net(**RETRAIN, **{"proof.segments": "126"})  # every segment audited
    bob, val = net.clone("bob"), net.clone("val")
    real = train_mod.recorder
    monkeypatch.setattr(train_mod, "recorder", lambda *a: _Faker(**{k: getattr(h, k) for k in ("every", "keep",
                                                                 "follower")}) if (h := real(*a)) else None)
    pr = net.train_submit(bob, "bob")
    [v] = _audit(val, bob)
    assert v.state == "rejected" and v.reason.startswith("retrain: step 3 of 20 does not replay (segment 1, steps 3-4)")
    assert v.retrain["retrain"] == "mismatch" and v.retrain["step"] == 3 and "retrain-failed" in v.flags
    verdict = LocalForge.for_ledger(val).get(pr["id"])
    fields = parse_message(val.git.message(verdict.verdict_commit))[1]
    assert json_field(fields, "Woolf-Retrain")["retrain"] == "mismatch"
    assert {r["contributor"]: r for r in leaderboard(val)["rows"]}["bob"]["retrain_failed"] == 1
    assert {r["contributor"]: r.get("retrain_failed") for r in credit(val)["rows"]}["bob"] == 1


def test_a_delta_its_chain_does_not_end_at_is_rejected(make_net):
    net = make_net(**RETRAIN)
    bob, val = net.clone("bob"), net.clone("val")
    train(bob, TrainOptions(steps=20, contributor="bob", device="cpu"))
    path = work_dir(bob) / "trained.safetensors"
    trained, base = load_file(path), bob.load_weights(bob.head())
    save_atomic({k: base[k] + 2 * (trained[k] - base[k]) for k in base}, path)  # twice the work it did
    submit(bob, SubmitOptions(contributor="bob"))
    [v] = _audit(val, bob)
    assert v.state == "rejected" and v.reason.startswith("retrain: its chain does not end at its delta")
    assert "retrain-failed" in v.flags


def test_bad_recipes_and_a_crashing_replay_each_end_in_one_verdict(make_net, monkeypatch):
    net = make_net(**RETRAIN, **{"limits.max_retrain_seconds": "50", "scoring.copy_threshold": "0.9999"})
    bob, val = net.clone("bob"), net.clone("val")
    reasons = {}
    for name, changes in {"shard": {"data": {"kind": "shard", "owner": "alice", "version": 0, "order": "seed"}},
                          "slow": {"seconds": 1000.0},
                          "crash": {"params": {**bob.config.workload.params, "d_model": 48}, "seconds": 0.0},
                          "param": {"params": {"d_model": 32, "dropout": 0.5}}}.items():
        train(bob, TrainOptions(steps=20, contributor="bob", seed=len(reasons), device="cpu"))  # not copies of each other
        _rewrite_recipe(bob, **changes)
        reasons[submit(bob, SubmitOptions(contributor="bob"))["id"]] = name
    got = {reasons[v.id]: v for v in _audit(val, bob)}
    assert set(got) == set(reasons.values()) and all(v.state == "rejected" for v in got.values())
    assert got["shard"].reason.startswith("recipe: shard alice@v0 was not assigned to bob")
    assert got["slow"].reason.startswith("recipe: replaying its 4 audited steps would take about 200 s, over the "
                                         "ledger's limits.max_retrain_seconds 50")
    assert got["param"].reason == "recipe: unknown workload parameter(s) 'dropout'"
    assert got["crash"].reason.startswith("retrain: its proof could not be replayed (RuntimeError")
    assert got["crash"].retrain["retrain"] == "failed" and "retrain-failed" not in got["crash"].flags


def test_a_private_data_prs_samples_are_sealed_to_the_validator_and_replay(make_net, tmp_path):
    net = make_net(**RETRAIN, **{"policy.require_retrain": "true"})
    alice, val = net.clone("alice"), net.clone("val")
    text = tmp_path / "mine.txt"
    text.write_bytes(b"my own private text, nobody else has it. " * 200)
    train(alice, TrainOptions(steps=20, contributor="alice", data=str(text), device="cpu"))
    pr = submit(alice, SubmitOptions(contributor="alice"))
    assert Validator(val, device="cpu", name="v1").run() == []
    [answered] = prove_once(alice)
    val.fetch()
    answer = val.git.message(val.git.rev_parse(f"refs/woolf/pr/{pr['id']}/answer"))
    assert "samples:" in answer and b"nobody else" not in b"".join(  # sealed: storage never holds the text
        p.read_bytes() for p in (net.root / "storage").rglob("*") if p.is_file())
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "merged" and v.retrain["retrain"] == "matched", v.reason
    recipe = json.loads(val.git.show_bytes(f"refs/woolf/pr/{pr['id']}/head:submissions/{pr['id']}/submission.json"))
    assert recipe["recipe"]["data"]["kind"] == "private" and recipe["recipe"]["data"]["bytes"] > 0


def test_private_samples_other_than_those_trained_on_do_not_replay(make_net, tmp_path, monkeypatch):
    net = make_net(**RETRAIN)
    alice, val = net.clone("alice"), net.clone("val")
    text = tmp_path / "mine.txt"
    text.write_bytes(b"my own private text, nobody else has it. " * 200)
    train(alice, TrainOptions(steps=20, contributor="alice", data=str(text), device="cpu"))
    submit(alice, SubmitOptions(contributor="alice"))
    assert Validator(val, device="cpu", name="v1").run() == []
    real = CharLM.sample_windows

    def other(self, data, gen, steps):  # the same positions, other bytes: not what it trained on
        got = real(self, data, gen, steps)
        return {**got, "windows": got["windows"] ^ 1}

    monkeypatch.setattr(CharLM, "sample_windows", other)
    prove_once(alice)
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "rejected" and v.reason.startswith("retrain: step ") and "does not replay" in v.reason


def test_private_data_that_commits_to_nothing_under_require_retrain_and_a_replay_past_its_time(make_net, monkeypatch,
                                                                                               tmp_path):
    net = make_net(**RETRAIN, **{"policy.require_retrain": "true", "limits.max_retrain_seconds": "0.001"})
    alice, val = net.clone("alice"), net.clone("val")
    text = tmp_path / "mine.txt"
    text.write_bytes(b"my own private text, nobody else has it. " * 200)
    train(alice, TrainOptions(steps=20, contributor="alice", data=str(text), device="cpu"))
    _rewrite_recipe(alice, data={"kind": "private"})  # a recipe declared by hand: no digest, no samples
    private = submit(alice, SubmitOptions(contributor="alice"))["id"]
    train(alice, TrainOptions(steps=20, contributor="alice", seed=4, device="cpu", fresh=True))
    _rewrite_recipe(alice, seconds=0.0)  # declared instantly replayable: the estimate lets it through
    timed = submit(alice, SubmitOptions(contributor="alice"))["id"]
    got = {v.id: v for v in _audit(val, alice)}
    assert got[private].reason.startswith("retrain: this PR cannot be audited (private data")
    assert "policy.require_retrain is on" in got[private].reason
    assert got[timed].state == "rejected" and got[timed].reason.startswith(
        "retrain: replaying its audited segments ran past limits.max_retrain_seconds 0.001")
    assert got[timed].retrain["retrain"] == "timed out"


def test_rate_zero_audits_nothing_and_private_data_is_recorded_unverifiable(make_net, tmp_path):
    net = make_net(**{"policy.min_improvement": "-10", "validators.retrain_rate": "0.5"})
    alice, val = net.clone("alice"), net.clone("val")
    text = tmp_path / "mine.txt"
    text.write_bytes(b"private words " * 400)
    train(alice, TrainOptions(steps=20, contributor="alice", data=str(text), device="cpu"))
    _rewrite_recipe(alice, data={"kind": "private"})
    submit(alice, SubmitOptions(contributor="alice"))
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "merged" and v.retrain == {
        "retrain": "unverifiable", "why": "private data (woolf train --data PATH) that commits to no digest"}


def test_under_a_quorum_each_vote_says_whether_it_audited(make_net):
    net = make_net(**RETRAIN, **{"validators.quorum": "2"})
    alice = net.clone("alice")
    net.train_submit(alice, "alice")
    v1, v2 = Validator(net.clone("v1"), device="cpu"), Validator(net.clone("v2"), device="cpu")
    assert v1.run() == [] and v2.run() == []  # each challenges: each validator's salt draws its own segments
    assert len(prove_once(alice)) == 2
    assert v1.run() == []
    [verdict] = v2.run()
    assert verdict.accepted
    seen = net.clone("observer")
    votes = json.loads(parse_message(seen.git.message(seen.head().commit))[1]["Woolf-Votes"])
    audited = [json_field(parse_message(seen.git.message(c))[1], "Woolf-Retrain") for c in votes]
    assert [r["retrain"] for r in audited] == ["matched", "matched"]


def test_one_slow_recipe_does_not_move_the_estimate_that_refuses_honest_prs(make_net):
    """The poisoned estimate: a validator estimated every recipe from the speed of its LAST re-training
    (seconds / steps, set-up included): one legal 1-step recipe at the ledger's largest batch made honest
    PRs be refused as "about N s, over limits.max_retrain_seconds" until the process ended. Now the
    estimate of an audit is per unit of work (steps x batch x context), from the replay's loop alone, a
    median over many audits (core/retrain_speed.py): one PR cannot move it."""
    net = make_net(**RETRAIN, **{"limits.max_retrain_seconds": "8"})
    alice, bob, val = net.clone("alice"), net.clone("bob"), net.clone("val")
    train(alice, TrainOptions(steps=1, contributor="alice", device="cpu"))
    big = {**alice.config.workload.params, "batch_size": alice.config.limits.max_batch}
    _rewrite_recipe(alice, params=big, batch=big["batch_size"], seconds=0.1)  # 1 step at the largest batch
    poison = submit(alice, SubmitOptions(contributor="alice"))["id"]  # signed: judged first
    honest = [net.train_submit(bob, "bob", seed=s)["id"] for s in (1, 2)]
    got = {v.id: v for v in _audit(val, alice, bob)}
    assert got[poison].state == "rejected", got[poison].reason
    for i in honest:  # before: "recipe: re-training its 20 steps would take about 4x s, over ... 8"
        assert got[i].retrain and got[i].retrain["retrain"] == "matched", got[i].reason
