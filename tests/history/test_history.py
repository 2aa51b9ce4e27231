"""History tools: eval, diff, bisect and revert on a ledger where one merge is poisoned on purpose.

The story: alice and carol teach the model Greek along with Python (v1, v2); bob's
merge (v3) scrambles the input embeddings of every non-ASCII byte, which the
ledger's benchmark (Python source, ASCII) cannot see, so it passes the gate;
later merges (v4, v5) train on Python only. Bisect on a Greek benchmark names
v3 and bob's PR; revert's PR merges and the Greek loss recovers.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import make_network
from tests.crafting import craft_pr
from woolf.audit.recompute import audit
from woolf.cli.main import main
from woolf.core.bisect import first_bad, max_probes
from woolf.core.tensordiff import diff_weights
from woolf.errors import UsageError
from woolf.forges.local import LocalForge
from woolf.history import Evaluator, bisect, diff_versions, revert
from woolf.ledger.change import set_config
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.validator import Validator
from woolf.workloads import corpus

GREEK = ("Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. Ένα, δύο, τρία, τέσσερα. "
         "Σήμερα ο ουρανός είναι καθαρός και η θάλασσα ήρεμη. ")


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    root = tmp_path_factory.mktemp("history")
    # the default gate: a merge may cost at most 0.02 nats on the benchmark. A poison that neither the
    # benchmark nor its contributor's shard can measure is refused by scoring.min_effect; this story
    # turns that off to have one merged (as one could before scoring existed, or below the threshold)
    net = make_network(root, **{"scoring.min_effect": "0"})
    alice, bob, carol, val = (net.clone(n) for n in ("alice", "bob", "carol", "val"))
    v = Validator(val, device="cpu", name="v1")
    mixed = root / "mixed"
    mixed.mkdir()
    (mixed / "greek.txt").write_text(GREEK * 40)
    for f in corpus.assign_shard("alice", 0, 2):
        (mixed / Path(f).name).write_bytes(corpus.read(f))

    def contribute(led, who, seed, data=None):
        train(led, TrainOptions(steps=20, contributor=who, seed=seed, device="cpu", data=data))
        sub = submit(led, SubmitOptions(contributor=who))
        (verdict,) = v.run()
        assert verdict.accepted, verdict.reason
        return sub

    contribute(alice, "alice", 0, str(mixed))
    contribute(carol, "carol", 1, str(mixed))
    bob.pull()
    w = bob.load_weights(bob.head())
    w["tok.weight"][128:] += torch.randn(128, w["tok.weight"].shape[1], generator=torch.Generator().manual_seed(7)) * 10
    save_file(w, str(root / "poison.safetensors"))
    poison = submit(bob, SubmitOptions(weights=root / "poison.safetensors", contributor="bob", message="better embeddings"))
    (verdict,) = v.run()
    assert verdict.accepted and verdict.version == 3, verdict.reason  # the benchmark cannot see it
    contribute(carol, "carol", 2)
    contribute(alice, "alice", 3)
    (root / "greek.txt").write_text(GREEK[40:] * 10 + GREEK[:40])
    user = net.clone("user")
    user.pull()
    return {"net": net, "val": v, "user": user, "poison": poison, "greek": root / "greek.txt", "root": root,
            "alice": alice, "carol": carol}


def _run(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.unit
def test_bisect_core_bound_and_monotone_search():
    for n in (1, 2, 3, 7, 999, 1000):
        for first in list(range(1, n + 1)) + [None]:
            calls: list[int] = []
            found, probes = first_bad(0, n, lambda m, c=calls, f=first: c.append(m) or (f is not None and m >= f))
            assert found == first and len(calls) <= max_probes(0, n) == math.ceil(math.log2(n + 1))
    assert max_probes(0, 999) == 10 and max_probes(0, 1000) == 10  # + the good version: 11 evaluations
    with pytest.raises(ValueError):
        first_bad(3, 3, lambda m: True)


@pytest.mark.unit
def test_tensordiff_arithmetic():
    a = {"w": torch.tensor([3.0, 4.0]), "x": torch.ones(2), "gone": torch.zeros(1)}
    b = {"w": torch.tensor([3.0, 4.0]) * 2, "x": torch.ones(3), "new": torch.zeros(1)}
    rows, total = diff_weights(a, b)
    by = {r["name"]: r for r in rows}
    assert by["w"]["l2"] == 5.0 and by["w"]["relative"] == 1.0 and by["w"]["cosine"] == pytest.approx(1.0)
    assert by["w"]["max_abs"] == 4.0 and by["x"]["change"] == "reshaped"
    assert by["gone"]["change"] == "removed" and by["new"]["change"] == "added"
    assert total["l2"] == 5.0


def test_eval_diff_bisect_find_the_poisoned_merge(story, capsys):
    user, greek, poison = story["user"], story["greek"], story["poison"]
    ev = Evaluator(user, greek)
    losses = [ev.metrics(user.show(n))["loss"] for n in range(6)]
    assert losses[3] > losses[2] + 0.3 and min(losses[3:]) > losses[2] + 0.3  # the poison stays
    assert ev.evaluations == 6 and Evaluator(user, greek).metrics(user.show(3))["loss"] == losses[3]
    # the CLI reads the same cache: no evaluation at all
    code, out, err = _run(capsys, "-C", str(user.root), "eval", "2", "3", "--benchmark", str(greek), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["metrics"]["loss"] for r in data["results"]] == losses[2:4] and data["cache_hits"] == 2
    assert data["evaluations"] == 0

    r = bisect(user, benchmark=greek, good=2, threshold=0.2)
    assert r["found"]["version"] == 3 and r["found"]["contributor"] == "bob"
    assert r["found"]["submission"] == poison["id"] and r["queries"] <= r["max_evaluations"] == 3
    code, out, err = _run(capsys, "-C", str(user.root), "bisect", "--benchmark", str(greek), "--good", "1",
                          "--threshold", "0.2", "--json")
    assert code == 0 and json.loads(out)["found"]["version"] == 3, err
    code, out, _ = _run(capsys, "-C", str(user.root), "bisect", "--benchmark", str(greek), "--good", "1")
    assert code == 0 and "first bad version: v3" in out and "bob" in out and "woolf revert 3" in out

    # the user's own test, as `git bisect run`: bad when the non-ASCII embeddings are scrambled
    script = story["root"] / "check.py"
    script.write_text("import os, sys\nfrom safetensors.numpy import load_file\n"
                      "w = load_file(os.environ['WOOLF_WEIGHTS'])['tok.weight']\n"
                      "sys.exit(1 if float(abs(w[128:]).mean()) > 2.0 else 0)\n")
    r = bisect(user, run=f"{sys.executable} {script}", good=0)
    assert r["found"]["version"] == 3 and len(r["probes"]) <= 1 + max_probes(0, 5)

    d = diff_versions(user, 2, 3)
    assert d["prs"] == [poison["id"]] and d["contributors"] == {"bob": 1}
    changed = {t["name"] for t in d["tensors"] if t["l2"] > 0}
    assert changed == {"tok.weight"} and d["metric"]["recorded"]["change"] == pytest.approx(0.0, abs=1e-9)
    code, out, err = _run(capsys, "-C", str(user.root), "diff", "2", "5", "--benchmark", str(greek), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert [e["version"] for e in d["between"]] == [3, 4, 5] and d["contributors"] == {"bob": 1, "carol": 1, "alice": 1}
    assert d["metric"]["evaluated"]["change"] == pytest.approx(losses[5] - losses[2])


def test_bad_input_is_refused_and_changes_nothing(story, capsys, tmp_path):
    user, greek = story["user"], story["greek"]
    refs = user.git.out("for-each-ref")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"abc\x00" * 200)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9 ".encode("latin-1") * 200)
    small = tmp_path / "small.txt"
    small.write_text("def f(): pass\n")
    cases = [
        (["eval", "9"], "version 9 does not exist"),
        (["eval", "1", "--benchmark", str(binary)], "not a text file"),
        (["eval", "1", "--benchmark", str(latin)], "not a text file"),
        (["eval", "1", "--benchmark", str(small)], "too small"),
        (["eval", "1", "--benchmark", str(tmp_path / "missing.txt")], "cannot read"),
        (["diff", "1", "12"], "version 12 does not exist"),
        (["bisect", "--benchmark", str(greek), "--good", "3", "--bad", "1"], "not older than"),
        (["bisect", "--benchmark", str(greek), "--good", "2", "--bad", "2"], "not older than"),
        (["bisect", "--benchmark", str(greek), "--good", "-1"], "does not exist"),
        (["bisect", "--benchmark", str(greek), "--threshold", "-1"], "--threshold"),
        (["bisect", "--run", "exit 1", "--good", "1"], "already bad"),
        (["bisect", "--run", "exit 125", "--good", "1"], "neither good"),
        (["revert", "0"], "genesis"),
        (["revert", "6"], "version 6 does not exist"),
    ]
    for args, needle in cases:
        code, out, err = _run(capsys, "-C", str(user.root), *args)
        assert code in (1, 2) and needle in err, (args, code, err)
    # a version that is not bad under the threshold: found nothing, exit 0 (issue 38), data still printed
    code, out, err = _run(capsys, "-C", str(user.root), "bisect", "--benchmark", str(greek), "--good", "2",
                          "--bad", "3", "--threshold", "100", "--json")
    assert code == 0 and json.loads(out)["found"] is None
    assert user.git.out("for-each-ref") == refs and not LocalForge.for_ledger(user).list(state="open")


def test_hostile_reverts_field_is_a_rejection(story):
    v = story["val"]
    led = v.ledger
    head = led.head("refs/remotes/origin/main")
    w = led.load_weights(head)
    delta = {k: torch.full_like(t, 1e-4) for k, t in w.items()}
    bad = [({"reverts": {"version": 3, "commit": "0" * 40}}, "another commit"),
           ({"reverts": {"version": head.version + 1, "commit": head.commit}}, "reverts is not"),
           ({"reverts": {"version": True, "commit": head.commit}}, "reverts is not"),
           ({"reverts": [3]}, "reverts is not"),
           ({"reverts": {"version": 3, "commit": head.commit, "x": 1}}, "reverts is not")]
    ids = {craft_pr(led, delta, meta_patch=patch): needle for patch, needle in bad}
    verdicts = v.run(ids=list(ids))
    assert len(verdicts) == len(bad)
    for verdict in verdicts:
        assert not verdict.accepted and ids[verdict.id] in verdict.reason, verdict.reason
    assert led.head("refs/remotes/origin/main").version == head.version


def test_revert_merges_and_recovers_then_revert_of_newest_is_exact(story, capsys):
    user, v, greek, poison = story["user"], story["val"], story["greek"], story["poison"]
    before = Evaluator(user, greek)
    loss2, loss3, loss5 = (before.metrics(user.show(n))["loss"] for n in (2, 3, 5))
    # a revert in carol's name is signed by carol's key (unsigned, a keyed name is nobody's: issue 25)
    pr = revert(story["carol"], 3, contributor="carol")
    assert pr["base_version"] == 5 and pr["reverts"]["submission"] == poison["id"]
    (verdict,) = v.run()
    assert verdict.accepted and verdict.version == 6 and verdict.staleness == 0, verdict.reason
    user.pull()
    v6 = user.show(6)
    assert v6.reverts == 3 and v6.contributor == "carol"
    loss6 = Evaluator(user, greek).metrics(v6)["loss"]
    # the Greek benchmark recovers most of what the poison cost (v4 and v5 trained on Python only)
    assert loss5 - loss6 > 0.5 * (loss3 - loss2), (loss2, loss3, loss5, loss6)
    code, out, err = _run(capsys, "-C", str(user.root), "revert", "3")
    assert code == 2 and "already reverted by version 6" in err
    code, out, err = _run(capsys, "-C", str(user.root), "log", "--json")
    assert code == 0 and [x["reverts"] for x in json.loads(out)][:2] == [3, None]

    # reverting the newest merge (staleness 0, attenuated, alpha 1) gives its parent back: each element
    # is parent + ((parent - v6) rounded) rounded, within one float32 ulp of max(|parent|, |v6|)
    code, out, err = _run(capsys, "-C", str(story["alice"].root), "revert", "6", "--contributor", "alice", "--json")
    assert code == 0 and json.loads(out)["reverts"]["version"] == 6, err
    (verdict,) = v.run()
    assert verdict.accepted and verdict.version == 7 and verdict.staleness == 0, verdict.reason
    user.pull()
    parent, reverted, now = (user.load_weights(user.show(n)) for n in (5, 6, 7))
    exact = total = 0
    for k in parent:
        bound = torch.maximum(parent[k].abs(), reverted[k].abs()) * 2.0 ** -23
        assert bool(((now[k] - parent[k]).abs() <= bound).all()), k
        exact, total = exact + int((now[k] == parent[k]).sum()), total + parent[k].numel()
    assert exact >= 0.9 * total  # bit-exact wherever the subtraction is exact (Sterbenz), most elements
    assert diff_versions(user, 5, 7)["total"]["max_abs"] <= 2.0 ** -20

    report = audit(user)  # every merge, reverts included, recomputes bit for bit
    assert report.ok, report.problems

    from woolf.report.build import _markdown

    md = _markdown("t", list(reversed(user.log())), [], None)
    assert "carol (revert of v3)" in md and "alice (revert of v6)" in md


def test_revert_under_momentum_is_not_exact_and_diff_says_how_far(make_net):
    net = make_net(**{"merge.rule": "nesterov", "policy.min_improvement": "-10"})
    alice, val = net.clone("alice"), net.clone("val")
    v = Validator(val, device="cpu", name="v1")
    net.train_submit(alice, "alice", steps=5)
    assert v.run()[0].accepted
    pr = revert(alice, 1, contributor="alice")
    (verdict,) = v.run()
    assert verdict.accepted and verdict.version == 2 and pr["reverts"]["version"] == 1
    val.main_ref = "refs/remotes/origin/main"
    merge_step = diff_versions(val, 0, 1)["total"]["l2"]
    left = diff_versions(val, 0, 2)["total"]["l2"]  # momentum carries part of v1's step through the revert
    assert 0 < left < merge_step
    # a maintainer's change version has no weights change to take back; it evaluates as its parent
    change = set_config(net.work, {"policy.min_improvement": "-20"}, reason="looser gate")
    with pytest.raises(UsageError, match="is a change"):
        revert(alice, change.version, contributor="alice")
    alice.pull()
    ev = Evaluator(alice)
    assert ev.metrics(alice.show(3)) == ev.metrics(alice.show(2)) and ev.evaluations == 2
