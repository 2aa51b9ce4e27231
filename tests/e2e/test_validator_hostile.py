"""The hand-built hostile corpus mixed with honest PRs through a real validator process: one pass, every verdict."""

from __future__ import annotations

import json

from tests.conftest import run_cli
from tests.crafting import craft_pr
from tests.hostile_corpus import build_corpus, delta
from woolf.audit.recompute import audit


def test_hostile_corpus_mixed_with_honest_prs(network):
    val, mallory, alice = network.clone("val"), network.clone("mallory"), network.clone("alice")
    honest = [craft_pr(alice, tensors=delta(alice, seed=1), who="alice")]
    cases = build_corpus(network, mallory)
    assert len(cases) >= 40
    honest += [craft_pr(alice, tensors=delta(alice, seed=s), who=w) for s, w in ((2, "bob"), (3, "carol"))]
    # a real validator process: one pass, exit 0, a verdict for every PR it could decide
    proc = run_cli("validate", "--all", "--json", "--device", "cpu", cwd=val.root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdicts = {v["id"]: v for v in json.loads(proc.stdout)}
    assert all(verdicts[i]["accepted"] for i in honest), [verdicts[i]["reason"] for i in honest]
    listing = run_cli("pr", "list", "--json", cwd=network.clone("observer").root)
    assert listing.returncode == 0, listing.stderr[-2000:]
    prs = {p["id"]: p for p in json.loads(listing.stdout)}
    for name, case in cases.items():
        if case.expect == "rejected":
            v = verdicts.get(case.sub_id)
            assert v is not None and not v["accepted"], name
            assert case.needle in v["reason"], f"{name}: {v['reason']}"
            assert "could not process" not in v["reason"], f"{name} needs a reason of its own"
            assert prs[case.sub_id]["state"] == "rejected", name
        elif case.expect == "quarantined":
            assert case.sub_id not in verdicts, name
            assert prs[case.sub_id]["state"] == "quarantined" and case.needle in prs[case.sub_id]["reason"], name
        else:
            assert case.needle in listing.stderr, f"{name}: {listing.stderr[-1000:]}"
    assert sorted(verdicts) == sorted(honest + [c.sub_id for c in cases.values() if c.expect == "rejected"])
    # nothing hostile reached main; the honest PRs did, and the ledger audits clean
    assert sorted(v.submission for v in val.log(ref="refs/remotes/origin/main") if v.submission) == sorted(honest)
    assert audit(network.clone("auditor")).ok
    # a second pass finds nothing left to do and still exits 0
    again = run_cli("validate", "--all", "--json", "--device", "cpu", cwd=val.root)
    assert again.returncode == 0 and json.loads(again.stdout) == []
