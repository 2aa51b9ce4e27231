"""The validator: staleness, attenuation, the benchmark gate, the bad-PR corpus, audit."""

from __future__ import annotations

import struct
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save

from tests.conftest import git
from tests.crafting import craft_pr, craft_prs, force_ref
from woolf.audit.recompute import audit
from woolf.forges.local import LocalForge
from woolf.ledger.ledger import Ledger
from woolf.protocol import layout
from woolf.storage.files import hashes_of_file
from woolf.validator import Validator


def _delta(led, scale=0.01, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = led.load_weights(led.head("refs/remotes/origin/main"))
    return {k: (torch.randn(v.shape, generator=g) * scale).to(v.dtype) for k, v in w.items()}


def test_two_prs_staleness_and_attenuation(network):
    alice, bob, val = network.clone("alice"), network.clone("bob"), network.clone("val")
    a = network.train_submit(alice, "alice")
    b = network.train_submit(bob, "bob", seed=1)
    v = Validator(val, device="cpu", name="v1")
    verdicts = v.run()
    assert [x.id for x in verdicts] == [a["id"], b["id"]]
    first, second = verdicts
    assert first.accepted and first.version == 1 and first.staleness == 0 and first.attenuation == 1.0
    assert second.accepted and second.version == 2 and second.staleness == 1
    assert second.attenuation == 0.5
    # recorded weights of version 2 == version 1 + alpha * 1/2 * delta_b
    v1, v2 = val.load_weights(val.show(1)), val.load_weights(val.show(2))
    _, ptr_rel, _ = layout.submission_paths(b["id"])
    pr = LocalForge.for_ledger(val).get(b["id"])
    delta = load_file(val.store.fetch_object(val.pointer(pr.head, ptr_rel)))
    for k in v1:
        expected = v1[k] + delta[k] * torch.tensor(0.5, dtype=torch.float32)
        assert torch.equal(v2[k], expected)
    rec = val.show(2)
    assert rec.contributor == "bob" and rec.base_version == 0 and rec.alpha == 1.0
    assert rec.metrics["loss"] == second.metrics["after"]["loss"]
    assert set(rec.timings) >= {"fetch", "checks", "load", "merge", "evaluation", "upload"}
    assert rec.device == f"cpu; torch {torch.__version__.split('+')[0]}"  # where the metrics came from
    # any clone sees the history and the verdicts
    carol = network.clone("carol")
    carol.pull()
    assert [x.version for x in carol.log()] == [2, 1, 0]
    states = {p.id: p.state for p in LocalForge.for_ledger(carol).list()}
    assert states == {a["id"]: "merged", b["id"]: "merged"}
    assert audit(carol).ok
    # main is a linear first-parent chain whose merges carry the PR head as second parent
    assert carol.show(2).parents[1] == pr.head


def test_worse_candidate_is_rejected_with_metrics(make_net):
    net = make_net(**{"policy.min_improvement": "0.0"})
    val = net.clone("val")
    bad = craft_pr(val, tensors=_delta(val, scale=0.5))
    [verdict] = Validator(val, device="cpu").run()
    assert verdict.id == bad and not verdict.accepted and verdict.state == "rejected"
    assert verdict.metrics["after"]["loss"] > verdict.metrics["before"]["loss"]
    assert "below the required" in verdict.reason
    x = net.clone("x")
    pr = LocalForge.for_ledger(x).get(bad)
    assert pr.state == "rejected" and pr.metrics_after["loss"] == verdict.metrics["after"]["loss"]
    assert "Woolf-Device: cpu; torch " in git("log", "-1", "--format=%B", pr.verdict_commit, cwd=x.root)
    assert git("rev-parse", "main", cwd=net.hub) == net.work.head().commit


def _header_bomb():
    return struct.pack("<Q", 2**40) + b"{}"


def _many_entries():
    import json

    h = json.dumps({f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}
                    for i in range(100_000)}).encode()
    return struct.pack("<Q", len(h)) + h


CORPUS = {
    "truncated": (lambda led: {"raw": save(_delta(led))[:100]}, "header length"),
    "header bomb": (lambda led: {"raw": _header_bomb()}, "header length"),
    # issue 37: over the model's dense size, refused before its header is read
    "100k entries": (lambda led: {"raw": _many_entries()}, "refused before download"),
    "wrong dtype": (lambda led: {"tensors": {k: v.double() for k, v in _delta(led).items()}},
                    "the model has F32"),
    "missing tensor": (lambda led: {"tensors": dict(list(_delta(led).items())[1:])}, "missing tensors"),
    "extra tensor": (lambda led: {"tensors": {**_delta(led), "evil": torch.zeros(1)}}, "unexpected tensors"),
    "nan": (lambda led: {"tensors": {k: v * float("nan") for k, v in _delta(led).items()}}, "NaN or Inf"),
    "inf": (lambda led: {"tensors": {k: v + float("inf") for k, v in _delta(led).items()}}, "NaN or Inf"),
    "scaled 1e6": (lambda led: {"tensors": {k: v * 1e6 for k, v in _delta(led).items()}}, "delta norm"),
    "pickle": (lambda led: {"raw": __import__("pickle").dumps({"w": [0.0] * 64})}, "header length"),
    "changes config": (lambda led: {"tensors": _delta(led), "extra_files": {layout.CONFIG: b"name='x'\n"}},
                       "touches ledger/woolf.toml"),
    "changes dvc config": (lambda led: {"tensors": _delta(led), "extra_files": {".dvc/config": b"[core]\n"}},
                           "touches .dvc/config"),
    "changes workflow": (lambda led: {"tensors": _delta(led),
                                      "extra_files": {".github/workflows/x.yml": b"on: push\n"}},
                         "touches .github/workflows/x.yml"),
    "changes code": (lambda led: {"tensors": _delta(led), "extra_files": {"sitecustomize.py": b"import os\n"}},
                     "touches sitecustomize.py"),
    "symlink": (lambda led: {"tensors": _delta(led), "files_patch": lambda f, i: {
        **f, layout.submission_paths(i)[2]: ("120000", b"../../.dvc/config")}}, "is a symlink"),
    "bad schema": (lambda led: {"tensors": _delta(led), "meta_patch": {"delta": {"kind": "dense"}}},
                   "schema 1"),
    "meta names another base": (lambda led: {"tensors": _delta(led), "meta_patch": {"base_version": 7}},
                                "another base"),
    "pointer disagrees": (lambda led: {"tensors": _delta(led), "meta_patch": {"delta": {
        "kind": "dense", "sha256": "0" * 64, "md5": "0" * 32, "size": 10}}}, "pointer disagrees"),
}


def test_bad_pr_corpus_each_rejected_with_its_reason(network):
    val = network.clone("val")
    ids = dict(zip(CORPUS, craft_prs(val, [make(val) for make, _ in CORPUS.values()]), strict=True))
    main_before = git("rev-parse", "main", cwd=network.hub)
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    for name, (_, needle) in CORPUS.items():
        v = verdicts[ids[name]]
        assert not v.accepted, name
        assert needle in v.reason, f"{name}: {v.reason}"
    assert git("rev-parse", "main", cwd=network.hub) == main_before
    assert all(p.state == "rejected" for p in LocalForge.for_ledger(val).list())


def test_pr_with_two_commits_and_foreign_base(network):
    val = network.clone("val")
    head = val.head()
    extra = val.git.commit_tree_with(head.commit, {"notes.txt": b"hi"}, "extra\n", [head.commit])
    two = craft_pr(val, tensors=_delta(val), parent=extra)
    fake_version = val.git.commit_tree_with(head.commit, {}, "x\n\nWoolf-Version: 0\n", [])
    foreign = craft_pr(val, tensors=_delta(val), parent=fake_version)
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert "not one commit on top of a version commit" in verdicts[two].reason
    assert "is not on main" in verdicts[foreign].reason


def test_replay_of_merged_delta(network):
    val = network.clone("val")
    d = _delta(val)
    first = craft_pr(val, tensors=d)
    assert Validator(val, device="cpu").run()[0].accepted
    again = craft_pr(val, tensors=d)
    [v] = Validator(val, device="cpu").run()
    assert v.id == again and not v.accepted and "replay" in v.reason
    assert first != again


def test_beyond_max_staleness(make_net):
    net = make_net(**{"merge.max_staleness": "0", "policy.min_improvement": "-10"})
    val = net.clone("val")
    stale = craft_pr(val, tensors=_delta(val, seed=1))
    fresh = craft_pr(val, tensors=_delta(val, seed=2))
    # validate the fresh one first so that the stale one falls behind
    Validator(val, device="cpu").run(ids=[fresh])
    [v] = Validator(val, device="cpu").run(ids=[stale])
    assert not v.accepted and "max_staleness 0" in v.reason


def test_validate_unknown_id(network):
    val = network.clone("val")
    with pytest.raises(Exception, match="no pull request"):
        Validator(val, device="cpu").run(ids=["20261129T000000000Z-nobody-00000000"])


def test_audit_detects_tampered_storage_and_forged_version(network, tmp_path):
    val = network.clone("val")
    craft_pr(val, tensors=_delta(val))
    Validator(val, device="cpu").run()
    assert audit(val).ok
    # forged version 2: claims a merge of a PR but carries other weights
    led = network.clone("forger")
    led.pull()
    sub = craft_pr(led, tensors=_delta(led, seed=5))
    pr = LocalForge.for_ledger(led).get(sub)
    w = led.load_weights(led.head())
    forged = {k: v + 1.0 for k, v in w.items()}
    p = tmp_path / "forged.safetensors"
    p.write_bytes(save(forged))
    sha = hashes_of_file(p)[1]
    ptr = led.store.put(p, "model.safetensors")
    head = led.head()
    msg = (f"woolf: version 2\n\nWoolf-Version: 2\nWoolf-Base-Version: 1\nWoolf-Staleness: 0\n"
           f"Woolf-Attenuation: 1.0\nWoolf-Alpha: 1.0\nWoolf-Submission: {sub}\nWoolf-Weights-Sha256: {sha}\n")
    commit = led.git.commit_tree_with(head.commit, {layout.POINTER: ptr.render()}, msg, [head.commit, pr.head])
    with pytest.raises(subprocess.CalledProcessError) as refused:  # the hub's hook refuses it
        git("push", "-q", "origin", f"{commit}:refs/heads/main", cwd=led.root)
    assert "no signature" in refused.value.stderr.decode()
    force_ref(network.hub, led.root, commit, "refs/heads/main")  # a forge without protection would take it
    auditor = network.clone("auditor")
    report = audit(auditor)
    assert not report.ok
    assert any(p["version"] == 2 and "recomputed weights differ" in p["problem"] for p in report.problems)
    # tampered storage object of version 1, seen from a fresh clone
    v1 = auditor.show(1)
    v1ptr = auditor.pointer(v1.commit)
    obj = network.root / "storage" / "files" / "md5" / v1ptr.md5[:2] / v1ptr.md5[2:]
    obj.chmod(0o644)
    obj.write_bytes(obj.read_bytes()[:-4] + b"\0\0\0\0")
    report = audit(network.clone("auditor2"))
    assert any(p["version"] == 1 and "does not match its hash" in p["problem"] for p in report.problems)
    assert Ledger.open(network.work.root)  # nothing else disturbed
