"""A participant clone's disk (woolf/participant/cleanup.py): what `submit` removes once the PR is open, and
`woolf gc --local` for the rest; the clone keeps working after both."""

from __future__ import annotations

from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.participant.state import work_dir
from woolf.protocol import layout
from woolf.storage.pointer import Pointer
from woolf.validator import Validator


def _cached(ledger) -> set[str]:
    root = ledger.root / ".dvc" / "cache" / "files" / "md5"
    return {p.parent.name + p.name for p in root.glob("??/*") if p.is_file()}


def test_submit_and_gc_local_keep_a_clone_from_growing(network, cli):
    alice, val = network.clone("alice"), network.clone("val")
    sent = []
    for seed in (0, 1):
        train(alice, TrainOptions(steps=3, contributor="alice", seed=seed))
        pr = submit(alice, SubmitOptions(contributor="alice"))
        assert pr["freed"] >= pr["delta_size"]
        assert pr["delta_md5"] not in _cached(alice)  # uploaded, verified, and no longer kept here twice
        assert not (work_dir(alice) / "start-optimizer.safetensors").exists()
        sent.append(pr)
        assert [v.state for v in Validator(val, device="cpu").run()] == ["merged"]
        alice.pull()
    current = Pointer.parse((alice.root / layout.POINTER).read_bytes(), layout.POINTER).md5
    older = _cached(alice) - {current}
    assert older  # versions 0 and 1, pulled before
    left = alice.root / layout.WORK / "outgoing" / "20260101T000000000Z-alice-dead.safetensors"
    left.write_bytes(b"a delta whose upload failed")  # what a submit that failed midway leaves
    r = cli("gc", "--local", "--dry-run", cwd=alice.root)
    assert r.returncode == 0 and "would remove" in r.stdout and _cached(alice) - {current} == older, r.stderr
    r = cli("gc", "--local", cwd=alice.root)
    assert r.returncode == 0, r.stderr
    assert _cached(alice) == {current} and not (work_dir(alice) / "trained.safetensors").exists()
    assert not left.exists()
    # nothing it removed is missing later: the clone trains, submits and checks out an old version again
    train(alice, TrainOptions(steps=3, contributor="alice", seed=2))
    submit(alice, SubmitOptions(contributor="alice"))
    assert [v.state for v in Validator(val, device="cpu").run()] == ["merged"]
    assert alice.checkout(0, alice.root / "v0.safetensors").exists()
