"""The CLI's plumbing (woolf/cli/app.py). Commands say where they are: a validator's own clone shows what it
merged, a source checkout with a ledger/woolf.toml is not a ledger, a bare hub is the hub. Attacker text
(markup, terminal escapes) prints as text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import git
from tests.crafting import craft_pr
from tests.hostile_corpus import delta
from woolf.validator import Validator

ROOT_DIR = Path(__file__).parents[2]


def test_log_in_a_validators_clone_shows_the_versions_it_merged(network, cli):
    alice, val = network.clone("alice"), network.clone("val")
    network.train_submit(alice, "alice", steps=3)
    (verdict,) = Validator(val, device="cpu").run()
    assert verdict.accepted
    r = cli("log", "--json", cwd=val.root)
    assert r.returncode == 0, r.stderr
    assert [v["version"] for v in json.loads(r.stdout)] == [1, 0]
    assert "1 version(s) behind" in r.stderr and "woolf pull" in r.stderr


def test_export_in_a_validators_clone_writes_the_version_it_merged(network, cli, tmp_path):
    # `woolf log` there lists version 1 (origin/main); export said "version 1 does not exist" before `woolf pull`
    alice, val = network.clone("alice"), network.clone("val")
    network.train_submit(alice, "alice", steps=3)
    (verdict,) = Validator(val, device="cpu").run()
    assert verdict.accepted
    r = cli("export", "1", str(tmp_path / "v1"), "--json", cwd=val.root)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == 1
    record = json.loads((tmp_path / "v1" / "woolf-export.json").read_text())
    assert record["weights_sha256"] == val.show(1, ref="refs/remotes/origin/main").weights_sha256
    assert "1 version(s) behind" in r.stderr


def test_a_repository_carrying_a_ledger_config_but_no_versions_is_not_a_ledger(tmp_path, cli):
    src = tmp_path / "src"
    src.mkdir()
    git("init", "-q", "-b", "main", cwd=src)
    (src / "ledger").mkdir()
    shutil.copy(ROOT_DIR / "ledger" / "woolf.toml", src / "ledger" / "woolf.toml")
    git("add", ".", cwd=src)
    git("-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-qm", "source", cwd=src)
    for cmd in ("status", "log"):
        r = cli(cmd, cwd=src)
        assert r.returncode == 2 and "is not a ledger" in r.stderr and "woolf init" in r.stderr, (cmd, r.stderr)


def test_log_inside_the_bare_hub_says_it_is_the_hub_and_to_clone_it(network, cli):
    r = cli("log", cwd=network.hub)
    assert r.returncode == 2 and "ledger's hub" in r.stderr and "git clone" in r.stderr, r.stderr


EVIL = "\x1b]0;PWNED\x1b\\\x1b[2J"  # OSC set-title, then clear screen


def test_f12_f9_pr_show_and_validate_print_attacker_text_as_text(network, cli):
    mallory, val = network.clone("mallory"), network.clone("val")
    message = f"[/x] [bold]hi[/bold]\n          state merged\n        version 7 {EVIL}"
    shown_pr = craft_pr(mallory, tensors=delta(mallory, seed=1), meta_patch={"message": message})
    escaping = craft_pr(mallory, tensors=delta(mallory, seed=2), extra_files={f"notes/{EVIL}.txt": b"x"})
    out = cli("pr", "show", shown_pr, cwd=val.root)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[/x] [bold]hi[/bold]" in out.stdout and "\x1b" not in out.stdout
    assert [ln.split()[:2] for ln in out.stdout.splitlines() if ln.split()[:1] == ["state"]] == [["state", "open"]]
    proc = cli("validate", "--all", "--device", "cpu", cwd=val.root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert escaping in proc.stdout and "touches" in proc.stdout and "\x1b" not in proc.stdout + proc.stderr
