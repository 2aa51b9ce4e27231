"""Contribution flow: train, submit, PRs in the local forge, and every bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import SMALL, git, make_network
from tests.crafting import force_ref
from tests.processes import wait_until_deferred
from woolf.core.merge import compute_delta
from woolf.errors import ForgeError, InvalidWeightsError, StorageError, UsageError
from woolf.forges.local import LocalForge
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.participant.state import work_dir
from woolf.protocol import layout
from woolf.workloads.corpus import assign_shard


def test_submission_commit_and_delta(network):
    alice = network.clone("alice")
    result = network.train_submit(alice, "alice")
    assert result["base_version"] == 0
    pr = LocalForge.for_ledger(network.clone("carol")).get(result["id"])
    assert pr.state == "open" and pr.contributor == "alice" and pr.base_version == 0
    # one commit on top of the base version commit, touching only the submission area
    assert alice.git.parents(pr.head) == [alice.head().commit]
    changed = alice.git.changed_paths(alice.head().commit, pr.head)
    assert sorted(changed) == sorted(layout.submission_paths(result["id"])[1:])
    # the delta in storage is bit-identical to trained - base
    fresh = network.clone("dave")
    ptr = fresh.pointer(pr.head, layout.submission_paths(result["id"])[1])
    fresh.store.cache_path(ptr.md5).unlink(missing_ok=True)
    delta = load_file(fresh.store.fetch_object(ptr))
    trained = load_file(work_dir(alice) / "trained.safetensors")
    base = alice.load_weights(alice.head())
    expected = compute_delta(trained, base)
    assert all(torch.equal(delta[k], expected[k]) for k in expected)
    assert git("status", "--porcelain", cwd=alice.root) == ""


def test_two_participants_submit_at_the_same_time(network):
    clones = [network.clone(n) for n in ("p1", "p2")]
    for i, c in enumerate(clones):
        train(c, TrainOptions(steps=5, contributor=f"p{i+1}", seed=i))
    procs = [subprocess.Popen([sys.executable, "-m", "woolf", "submit", "--json"], cwd=c.root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in clones]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    ids = {json.loads(o)["id"] for o, _ in outs}
    listed = LocalForge.for_ledger(network.clone("third")).list()
    assert {p.id for p in listed} == ids and all(p.state == "open" for p in listed)


@pytest.mark.unit
def test_shard_assignment_is_deterministic_and_personal():
    assert assign_shard("alice", 3) == assign_shard("alice", 3)
    assert assign_shard("alice", 3) != assign_shard("bob", 3)
    assert assign_shard("alice", 3) != assign_shard("alice", 4)


def test_train_on_own_data(network, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.txt").write_text("hello world, " * 200)
    alice = network.clone("alice")
    result = train(alice, TrainOptions(steps=3, data=str(tmp_path / "mine"), contributor="alice"))
    assert result["training"]["data"] == "private"  # where your files are stays on your machine


def test_external_command_workload(tmp_path):
    import woolf

    root = __import__("pathlib").Path(woolf.__file__).parents[1]
    script = root / "examples" / "train_command.py"
    params = "d_model=32,n_layer=1,context=32,batch_size=8"
    net = make_network(tmp_path, **{
        "workload.command": f"'{sys.executable} {script} --base {{base}} --out {{out}} "
                            f"--data {{data}} --steps {{steps}} --state {{state}} --params {params}'"})
    (tmp_path / "data.txt").write_text("def f(x):\n    return x\n" * 100)
    alice = net.clone("alice")
    result = train(alice, TrainOptions(steps=4, data=str(tmp_path / "data.txt"), contributor="alice"))
    assert result["training"]["command"] == sys.executable
    assert (alice.root / ".woolf" / "state" / "command" / "optimizer" / "optimizer.safetensors").exists()
    assert submit(alice, SubmitOptions(contributor="alice"))["base_version"] == 0
    with pytest.raises(UsageError, match="pass --data"):
        train(alice, TrainOptions(steps=4, contributor="alice"))


def test_optimizer_state_persists_across_contributions(network):
    alice = network.clone("alice")
    first = train(alice, TrainOptions(steps=5, contributor="alice"))
    assert first["training"]["optimizer"] == "fresh"
    second = train(alice, TrainOptions(steps=5, contributor="alice"))
    assert second["training"]["optimizer"] == "resumed at step 5"
    assert train(alice, TrainOptions(steps=5, contributor="alice", fresh=True))["training"]["optimizer"] == "fresh"
    assert not list((alice.root / ".woolf").glob("**/*.set-aside-*"))
    # never uploaded: a submission carries only the delta and its metadata
    sub = submit(alice, SubmitOptions(contributor="alice"))
    pr_files = git("ls-tree", "-r", "--name-only", sub["commit"], cwd=alice.root).split()
    assert not [f for f in pr_files if "state" in f or "optimizer" in f]


def test_state_of_another_model_is_set_aside_with_a_warning(network, tmp_path, cli):
    from woolf.workloads.charlm import CharLM

    alice = network.clone("alice")
    state = alice.root / ".woolf" / "state" / "optimizer"
    other = CharLM(d_model=16, n_layer=1, context=16, batch_size=2)
    other.train(other.genesis(), other.default_data("x", 0), 1, state_dir=state)
    r = cli("train", "--steps", "2", "--offline", cwd=alice.root)
    assert r.returncode == 0, r.stderr
    assert "warning: your optimizer started fresh (carried state did not load: made for" in r.stderr
    assert len(list(state.glob("optimizer.safetensors.set-aside-*"))) == 1
    (state / "optimizer.safetensors").write_bytes(b"\x00" * 64)  # corrupted
    r = cli("train", "--steps", "2", "--offline", "--json", cwd=alice.root)  # JSON: said on stderr all the same
    assert r.returncode == 0 and "started fresh (carried state did not load: unreadable" in r.stderr
    assert json.loads(r.stdout)["training"]["optimizer"].startswith("fresh (carried state did not load: unreadable")


def test_steps_auto_sizes_contributions_from_measured_speed(make_net, cli):
    net = make_net(**{"workload.auto_seconds": "0.5", "workload.max_steps": "400"})
    alice = net.clone("alice")
    first = train(alice, TrainOptions(steps="auto", contributor="alice"))
    assert first["training"]["steps"] == 20  # not measured yet: workload.steps
    rate = first["training"]["steps"] / first["training"]["seconds"]
    second = train(alice, TrainOptions(steps="auto", contributor="alice"))
    assert second["training"]["steps"] == max(1, min(400, round(rate * 0.5)))
    r = cli("train", "--steps", "sometimes", cwd=alice.root)
    assert r.returncode == 2 and "neither a number of steps nor 'auto'" in r.stderr
    for bad in ("0", "-5"):
        r = cli("train", "--steps", bad, cwd=alice.root)
        assert r.returncode == 2 and "not a positive number" in r.stderr and "Traceback" not in r.stderr


def test_ctrl_c_at_any_moment_of_train_stops_it_cleanly(network):
    """Ctrl-C while torch is still importing was swallowed (or broke numpy) before deferral."""
    import signal
    import subprocess
    import sys
    import time

    alice = network.clone("alice")
    for delay in (0.7, 2.4):  # after the ~0.1 s start-up of an idle machine: in torch's import, then later
        p = subprocess.Popen([sys.executable, "-m", "woolf", "train", "--offline", "--steps", "100000"],
                             cwd=alice.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until_deferred(p)  # not in the interpreter's own start-up, however long the machine takes
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=120)
        finally:
            p.kill()  # a failed run leaves no trainer behind
        assert p.returncode == 130 and "Traceback" not in err, err
        assert "interrupted" in err
    assert not (alice.root / ".woolf" / "work" / "trained.safetensors").exists()


# -- bad input: a clear error, nothing pushed ---------------------------------------------

def _no_prs(net):
    return git("for-each-ref", layout.PR_PREFIX, cwd=net.hub) == ""


def test_submit_with_nothing_trained(network, capsys, cli):
    alice = network.clone("alice")
    r = cli("submit", cwd=alice.root)
    assert r.returncode == 2 and "nothing trained" in r.stderr
    assert _no_prs(network)


@pytest.mark.parametrize("mutate,needle", [
    (lambda w: {**w, "extra.weight": torch.zeros(2)}, "unexpected tensors"),
    (lambda w: {k: v.double() for k, v in w.items()}, "the model has F32"),
    (lambda w: {k: v * float("nan") for k, v in w.items()}, "NaN or Inf"),
    (lambda w: {k: v + float("inf") for k, v in w.items()}, "NaN or Inf"),
    (lambda w: dict(w), "all zeros"),
])
def test_submit_bad_weights(network, tmp_path, mutate, needle):
    alice = network.clone("alice")
    alice.pull()
    w = alice.load_weights(alice.head())
    p = tmp_path / "w.safetensors"
    save_file(mutate(w), p)
    with pytest.raises(InvalidWeightsError, match=needle):
        submit(alice, SubmitOptions(weights=p, contributor="alice"))
    assert _no_prs(network)


def test_submit_delta_over_size_limit(make_net):
    net = make_net(**{"limits.max_delta_bytes": "1000"})
    alice = net.clone("alice")
    train(alice, TrainOptions(steps=2, contributor="alice"))
    with pytest.raises(InvalidWeightsError, match="over the ledger's limit"):
        submit(alice, SubmitOptions(contributor="alice"))
    assert _no_prs(net)


def test_submit_base_no_longer_on_main(network):
    alice = network.clone("alice")
    train(alice, TrainOptions(steps=2, contributor="alice"))
    # rewrite history on the hub: version 0 is replaced by another root commit
    other = network.root / "other"
    Ledger.init(other, CreateOptions(storage=str(network.root / "storage2"), overrides={**SMALL, "name": "other"}))
    with pytest.raises(subprocess.CalledProcessError):  # the hub refuses a rewrite of main
        git("push", "-q", "--force", str(network.hub), "main:main", cwd=other)
    force_ref(network.hub, other, "main", "refs/heads/main")  # a forge without protection would not
    with pytest.raises(UsageError, match="no longer"):
        submit(alice, SubmitOptions(contributor="alice"))
    assert _no_prs(network)


def test_submit_with_uncommitted_ledger_changes(network):
    alice = network.clone("alice")
    train(alice, TrainOptions(steps=2, contributor="alice"))
    (alice.root / layout.CONFIG).write_text((alice.root / layout.CONFIG).read_text() + "\n# x\n")
    with pytest.raises(UsageError, match="uncommitted changes"):
        submit(alice, SubmitOptions(contributor="alice"))
    assert _no_prs(network)


def test_submit_with_unreachable_origin(network):
    alice = network.clone("alice")
    train(alice, TrainOptions(steps=2, contributor="alice"))
    git("remote", "set-url", "origin", str(network.root / "nowhere.git"), cwd=alice.root)
    with pytest.raises(ForgeError, match="cannot fetch"):
        submit(alice, SubmitOptions(contributor="alice"))
    assert _no_prs(network)


def test_submit_with_unreachable_storage(network):
    alice = network.clone("alice")
    train(alice, TrainOptions(steps=2, contributor="alice"))
    # config.local (git-ignored) points the remote where nothing can be written
    (alice.root / ".dvc" / "config.local").write_text("['remote \"storage\"']\n    url = /dev/null/x\n")
    with pytest.raises(StorageError):
        submit(Ledger.open(alice.root), SubmitOptions(contributor="alice"))
    assert _no_prs(network)


def test_withdraw(network):
    alice = network.clone("alice")
    sub = network.train_submit(alice, "alice", steps=2)
    forge = LocalForge.for_ledger(alice)
    forge.withdraw(sub["id"])
    assert forge.get(sub["id"]).state == "withdrawn"
    with pytest.raises(UsageError, match="already withdrawn"):
        forge.withdraw(sub["id"])


# -- the work area: one result, one PR ------------------------------------------------------

def test_submitting_the_same_result_twice_is_refused(network, cli):
    alice = network.clone("alice")
    first = network.train_submit(alice, "alice", steps=3)
    with pytest.raises(UsageError, match=f"submitted already, as PR {first['id']}"):
        submit(alice, SubmitOptions(contributor="alice"))
    r = cli("submit", cwd=alice.root)
    assert r.returncode == 2 and "submitted already" in r.stderr and "woolf train" in r.stderr, r.stderr
    assert len(LocalForge.for_ledger(alice).list()) == 1
    second = network.train_submit(alice, "alice", steps=3, seed=1)  # a new result goes as before
    assert second["id"] != first["id"] and len(LocalForge.for_ledger(alice).list()) == 2


def test_interrupted_train_says_an_earlier_result_is_waiting(network):
    import signal

    alice = network.clone("alice")
    train(alice, TrainOptions(steps=3, contributor="alice", device="cpu"))
    p = subprocess.Popen([sys.executable, "-m", "woolf", "train", "--offline", "--steps", "100000"],
                         cwd=alice.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until_deferred(p)  # from here on a Ctrl-C is raised at the first training step, wherever it lands
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()  # a failed run leaves no trainer behind
    assert p.returncode == 130, err
    assert "earlier result (trained from version 0) is still waiting" in " ".join(err.split()), err


def test_train_warns_when_the_gate_would_reject_the_result(make_net, cli):
    net = make_net(**{"policy.min_improvement": "5"})  # a gain of 5 nats: no 3-step run makes it
    alice = net.clone("alice")
    r = cli("train", "--offline", "--steps", "3", cwd=alice.root, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "gate would reject this result" in " ".join(r.stderr.split()), r.stderr
    assert "+5.0000" in r.stderr and "woolf train` again" in r.stdout
    assert json.loads((work_dir(alice) / "trained.json").read_text())["gate"]["passes"] is False
