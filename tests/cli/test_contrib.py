"""`woolf train` and `woolf submit` as commands (woolf/cli/participant/contrib.py, progress.py): progress
lines off a terminal, no empty bar before an early error, `--lora` with `--nproc` refused before torchrun starts."""

from __future__ import annotations


def test_progress_lines_when_stderr_is_not_a_terminal(network, cli):
    r = cli("train", "--steps", "3", cwd=network.clone("alice").root)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("training step")]
    assert [x.split()[2] for x in lines] == ["1/3", "3/3"] and "loss" in lines[-1], r.stderr


def test_no_empty_progress_bar_before_an_early_error(network, cli):
    r = cli("train", "--take", "no-such-task", cwd=network.clone("alice").root, env={"TTY_COMPATIBLE": "1"})
    assert r.returncode != 0 and "no-such-task" in r.stderr, r.stderr
    assert "training" not in r.stderr and "0/" not in r.stderr, r.stderr  # an error, and no bar above it


def test_lora_with_several_processes_is_refused_before_torchrun_starts(network, cli):
    alice = network.clone("alice")
    for args, env in ((["--lora", "r=2"], {}), ([], {"WOOLF_LORA": "r=4"})):
        r = cli("train", "--nproc", "2", *args, cwd=alice.root, env=env)
        assert r.returncode == 2 and r.stderr.count("error:") == 1, r.stderr
        assert "--lora trains on one process" in r.stderr and "torchrun" not in r.stderr.lower()


def test_train_lora_takes_a_bare_rank_as_demo_lora_does(network, cli):
    net_ledger = network.clone("alice")
    r = cli("train", "--steps", "2", "--lora", "2", cwd=net_ledger.root)
    # this charlm ledger does not accept lora deltas: the refusal shows --lora 2 was read as r=2
    assert r.returncode == 2 and "does not accept lora deltas" in r.stderr, r.stderr
    assert "expected r=R" not in r.stderr
