"""Storage that grows by deltas: snapshots every K versions, `woolf gc`, rebuilds on checkout, `woolf storage`."""

from __future__ import annotations

import hashlib
import json

from woolf.audit.recompute import audit
from woolf.ledger.retention.gc import collect, survey
from woolf.validator import Validator


def _object(net, ledger, number):
    ptr = ledger.pointer(ledger.show(number, ref="refs/remotes/origin/main").commit)
    return net.root / "storage" / "files" / "md5" / ptr.md5[:2] / ptr.md5[2:]


def test_gc_keeps_snapshots_and_newest_and_rebuilds_the_rest(make_net, cli):
    net = make_net(**{"policy.min_improvement": "-10", "storage.snapshot_every": "2"})
    alice, val = net.clone("alice"), net.clone("val")
    for i, how in enumerate(["topk:0.05,bits:2", "dense", "topk:0.05,bits:4", "topk:0.1,bits:8"]):
        net.train_submit(alice, "alice", steps=5, seed=i, compress=how)
        [v] = Validator(val, device="cpu").run()
        assert v.accepted, v.reason
    before = survey(val)
    assert before["head"] == 4 and before["snapshots"]["count"] == 3  # versions 0, 2, 4
    assert before["reclaimable"]["count"] == 2 and before["deltas"]["count"] == 4
    assert before["removed"]["count"] == 0 and before["missing"]["count"] == 0

    dry = json.loads(cli("gc", "--dry-run", "--json", cwd=val.root).stdout)
    assert [r["version"] for r in dry["removed"]] == [1, 3] and dry["dry_run"]
    assert _object(net, val, 1).exists()
    done = collect(val)
    assert [r["version"] for r in done["removed"]] == [1, 3]
    assert not _object(net, val, 1).exists() and not _object(net, val, 3).exists()
    for n in (0, 2, 4):  # plain `dvc pull` of a snapshot or the newest still finds its object
        assert _object(net, val, n).exists()
    after = json.loads(cli("storage", "--json", cwd=val.root).stdout)
    assert after["reclaimable"]["count"] == 0 and after["removed"]["count"] == 2
    assert after["stored_bytes"] == before["stored_bytes"] - before["reclaimable"]["bytes"]
    assert collect(val)["removed"] == []  # nothing left to do

    carol = net.clone("carol")  # a fresh clone: nothing cached
    proc = cli("checkout", "3", "-o", str(net.root / "v3.safetensors"), cwd=carol.root)
    assert proc.returncode == 0, proc.stderr
    assert "rebuilt from version 2 and 1 merged deltas" in proc.stderr
    sha = hashlib.sha256((net.root / "v3.safetensors").read_bytes()).hexdigest()
    assert sha == carol.show(3).weights_sha256
    carol.checkout(1)
    assert carol.last_rebuild == {"version": 1, "from": 0, "deltas": 1}

    report = audit(val)  # gc'd versions are recomputed from their parent and delta, bit for bit
    assert report.ok, report.problems
    assert any("not kept in storage" in n for n in report.notes)

    # the ledger goes on: a participant trains, the validator merges on the newest version
    net.train_submit(alice, "alice", steps=5, seed=9, compress="topk:0.05,bits:2")
    [v] = Validator(val, device="cpu").run()
    assert v.accepted, v.reason
    assert collect(val, dry_run=True)["removed"] == [] and survey(val)["head"] == 5  # 4 is a snapshot

    # a snapshot that is gone is the audit's problem, not a note (gc never removes one)
    _object(net, val, 2).chmod(0o644)
    _object(net, val, 2).unlink()
    report = audit(val)
    assert not report.ok and any(p["version"] == 2 and p["kind"] == "missing" for p in report.problems)

    # issue 25, breach 4: garbage of the right size planted at removed versions' paths (a plain create,
    # which append-only storage permits). Rebuild verifies what it reads and falls back: v3's own
    # path and v1's hold junk, v2 is gone, so v3 is rebuilt from v0 and three deltas; both are named
    for n in (1, 3):
        path = _object(net, val, n)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * val.pointer(val.show(n, ref="refs/remotes/origin/main").commit).size)
    dave = net.clone("dave")
    dave.checkout(3)
    assert dave.last_rebuild["from"] == 0 and dave.last_rebuild["deltas"] == 3
    named = {t["version"] for t in dave.last_rebuild["tampered"]}
    assert named == {1, 3}, dave.last_rebuild
    sha = hashlib.sha256(dave.weights_path(dave.show(3)).read_bytes()).hexdigest()
    assert sha == dave.show(3).weights_sha256
    erin = net.clone("erin")  # `woolf storage` from a clone that has cached none of it
    proc = cli("storage", "--json", cwd=erin.root)
    assert json.loads(proc.stdout)["tampered"]["count"] == 2, proc.stdout
    proc = cli("storage", cwd=erin.root)
    assert "is not its bytes (planted or tampered)" in " ".join(proc.stderr.split())
