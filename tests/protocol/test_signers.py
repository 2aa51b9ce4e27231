"""Keys, allowed_signers, the hub and config changes through the CLI; config that names code is refused."""

from __future__ import annotations

import datetime
import json
import subprocess

import pytest
import torch

from tests.conftest import SMALL, key_for
from tests.crafting import craft_pr
from woolf.audit.recompute import audit
from woolf.cli.main import main
from woolf.errors import ConfigError, ForgeError, UsageError
from woolf.forges.local import LocalForge
from woolf.git.keys import configure
from woolf.git.repo import Git, clean_env
from woolf.participant import TrainOptions, train
from woolf.protocol import layout
from woolf.protocol.config import WorkloadConfig
from woolf.protocol.signers import Signers, signer_line
from woolf.protocol.trailers import format_message
from woolf.workloads.base import load_workload


def _cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_keys_hub_signers_and_config_changes_through_the_cli(tmp_path, capsys):
    keys = tmp_path / "keys"
    code, out, _ = _cli(capsys, "key", "create", "--out", str(keys / "alice"), "--name", "alice", "--json")
    assert code == 0 and json.loads(out)["allowed_signers_line"].startswith('alice namespaces="git" ssh-ed25519 ')
    code, out, _ = _cli(capsys, "key", "create", "--out", str(keys / "v2"), "--name", "v2", "--role", "validator")
    assert code == 0 and out.strip().splitlines()[-1].endswith("roles=validator")
    assert _cli(capsys, "key", "create", "--out", str(keys / "v2"))[0] == 2  # exists already
    led = tmp_path / "led"
    settings = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    code, _, err = _cli(capsys, "init", str(led), *settings)
    assert code == 2 and "pass --key" in err
    assert _cli(capsys, "init", str(led), "--key", str(keys / "alice"), *settings)[0] == 0
    code, out, _ = _cli(capsys, "hub", "init", str(tmp_path / "hub.git"), "--from", str(led), "--json")
    assert code == 0 and json.loads(out)["signed"] is True
    subprocess.run(["git", "remote", "add", "origin", str(tmp_path / "hub.git")], cwd=led, check=True, env=clean_env())
    # the maintainer adds a validator and changes the config: two signed change versions
    assert _cli(capsys, "-C", str(led), "signers", "add", "v2", "--key", str(keys / "v2.pub"),
                "--role", "validator")[0] == 0
    code, out, _ = _cli(capsys, "-C", str(led), "signers", "list", "--json")
    assert {s["name"]: s["roles"] for s in json.loads(out)["signers"]} == {
        "alice": ["contributor", "maintainer", "validator"], "v2": ["contributor", "validator"]}
    code, out, _ = _cli(capsys, "-C", str(led), "config", "set", "policy.min_improvement=-5", "-m", "looser")
    assert code == 0 and "version 2" in out
    code, _, err = _cli(capsys, "-C", str(led), "config", "set", "workload.name=subprocess:run")
    assert code == 3 and "names code" in err
    code, _, err = _cli(capsys, "-C", str(led), "signers", "remove", "alice")
    assert code == 2 and "without a maintainer" in err
    # the validator's key cannot change the config: the hub refuses it
    clone = tmp_path / "v2clone"
    subprocess.run(["git", "clone", "-q", str(tmp_path / "hub.git"), str(clone)], check=True, env=clean_env())
    code, _, err = _cli(capsys, "-C", str(clone), "key", "create", "--out", str(keys / "other"), "--configure")
    assert code == 0
    code, _, err = _cli(capsys, "-C", str(clone), "config", "set", "policy.min_improvement=-9")
    assert code == 7 and "the hub refused the push" in err and "a key not in allowed_signers" in err
    configure(Git(clone), keys / "v2")
    code, _, err = _cli(capsys, "-C", str(clone), "config", "set", "policy.min_improvement=-9")
    assert code == 7 and "signed by v2, who is not a maintainer" in err
    code, out, _ = _cli(capsys, "-C", str(led), "audit", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["signed"] and report["versions_checked"] == 3


@pytest.mark.unit
def test_allowed_signers_lines_are_checked():
    pub = open(f"{key_for('alice')}.pub").read()
    line = signer_line("alice", pub, ["validator"])
    signers = Signers.parse(f"# comment\n\n{line}\n")
    assert signers.roles_of("alice") == {"contributor", "validator"} and signers.names_with("validator") == {"alice"}
    assert Signers.parse(signers.render()).entries == signers.entries
    key = line.split()[2:4]
    for bad, needle in ((f'a*,b namespaces="git" {key[0]} {key[1]}', "one plain contributor id"),
                        (f"alice {key[0]} {key[1]}", "not an allowed-signers line"),
                        (f'alice namespaces="git" ssh-dss {key[1]}', "not an SSH public key type"),
                        (f'alice namespaces="git" {key[0]} {key[1]} roles=admin', "roles must be drawn"),
                        (f'alice namespaces="git" {key[0]} {key[1]} owner', "unexpected")):
        with pytest.raises(ConfigError, match=needle):
            Signers.parse(bad)


@pytest.mark.unit
def test_workloads_resolve_to_builtins_or_installed_entry_points(tmp_path, monkeypatch):
    for name in ("subprocess:run", "os:system", "builtins:exec", "../x"):
        with pytest.raises(ConfigError, match="names code"):
            load_workload(WorkloadConfig(name=name, params={"args": ["touch", str(tmp_path / "pwned")]}))
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(ConfigError, match="neither built in .* nor an installed entry point"):
        load_workload(WorkloadConfig(name="nope"))
    with pytest.raises(ConfigError, match="params are plain data"):
        load_workload(WorkloadConfig(name="synthetic", params={"when": datetime.date(2026, 1, 1)}))
    # a package installed by the participant registers a workload under goodwoolf.workloads
    dist = tmp_path / "site" / "woolf_extra-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: woolf-extra\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[goodwoolf.workloads]\ntiny = woolf.workloads.synthetic:Synthetic\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert type(load_workload(WorkloadConfig(name="tiny", params={"n_params": 64}))).__name__ == "Synthetic"


def test_training_command_needs_a_signed_config(make_net, monkeypatch):
    net = make_net(signed=False, **{"workload.command": "'echo {base} {out}'"})
    alice = net.clone("alice")
    with pytest.raises(UsageError, match="the ledger is unsigned"):
        train(alice, TrainOptions(steps=1, data=str(net.root / "work" / layout.CONFIG), contributor="alice"))


def test_withdrawal_needs_the_contributors_own_key(network):
    dave, alice = network.clone("dave"), network.clone("alice")
    sub = craft_pr(dave, tensors={"x": torch.zeros(1)}, who="dave")
    with pytest.raises(ForgeError, match="hub refused.*withdrawal may also be signed by dave"):
        LocalForge.for_ledger(dave).withdraw(sub)
    mine = craft_pr(alice, tensors={"x": torch.zeros(1)}, who="alice")
    LocalForge.for_ledger(alice).withdraw(mine)  # alice's clone signs with alice's listed key
    assert LocalForge.for_ledger(alice).get(mine).state == "withdrawn"


def test_reevaluate_catches_metrics_a_validator_key_made_up(network):
    val = network.clone("val")
    head = val.head("refs/remotes/origin/main")
    w = val.load_weights(head)
    sub = craft_pr(val, tensors={k: torch.zeros_like(v) for k, v in w.items()})  # the weights stay the same
    pr = LocalForge.for_ledger(val).get(sub)
    msg = format_message("woolf: version 1", {
        "Woolf-Version": 1, "Woolf-Submission": sub, "Woolf-Contributor": "mallory", "Woolf-Base-Version": 0,
        "Woolf-Staleness": 0, "Woolf-Attenuation": 1.0, "Woolf-Alpha": 1.0, "Woolf-Staleness-Function": "inverse",
        "Woolf-Delta-Sha256": pr.submission["delta"]["sha256"], "Woolf-Weights-Sha256": head.weights_sha256,
        "Woolf-Metrics-Before": {"loss": 5.0}, "Woolf-Metrics-After": {"loss": 0.1}})
    commit = val.git.commit_tree_with(head.commit, {}, msg, [head.commit, pr.head])  # signed with val's key
    LocalForge.for_ledger(val).merge(pr, commit, head.commit)  # a validator key: the hub accepts it
    assert audit(network.clone("auditor")).ok  # the arithmetic is consistent
    report = audit(network.clone("auditor2"), reevaluate=True)
    assert not report.ok
    [problem] = report.problems
    assert problem["version"] == 1 and "recorded 0.1" in problem["problem"]
    assert LocalForge.for_ledger(network.clone("v1")).get(sub).state == "merged"  # it did land
