"""Before building on main: woolf/ledger/trust.py (require_trusted_head, require_validator_key,
require_command_trust), unit-tested on hand-made ledgers.

The ledger is a plain `git init` repository whose main is a chain of version commits made with
git plumbing (hash-object, read-tree/update-index/write-tree on a private index, commit-tree,
update-ref), signed with `git -c gpg.format=ssh -c user.signingkey=KEY commit-tree -S`, and opened
as `Ledger(root)` (its DVC store is made lazily; trust never touches it). No `woolf init`, DVC or
hub. Every commit on main is what an attacker who read the code could write.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import key_for
from tests.gitobjects import Templates, commit_tree, copied
from tests.gitobjects import git_out as _git
from tests.gitobjects import pub as _pub
from tests.gitobjects import tree_with as _tree_with
from woolf.errors import IntegrityError, UsageError
from woolf.ledger.ledger import Ledger
from woolf.ledger.trust import (
    is_signed,
    require_command_trust,
    require_trusted_head,
    require_validator,
    require_validator_key,
)
from woolf.protocol import layout
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides, render_config
from woolf.protocol.signers import SIGNERS_PATH, Signers, signer_line
from woolf.protocol.trailers import format_message

pytestmark = pytest.mark.unit

HINT = "nothing is built on it; run `woolf audit` and tell the ledger's maintainers"
COMMAND = "python train.py {base} {out} {data} {steps}"


# work: maintainer and validator; boss: maintainer; val: validator; alice: contributor; mallory: unlisted
SIGNERS = Signers.parse("\n".join([
    signer_line("work", _pub("work"), ["maintainer", "validator"]), signer_line("boss", _pub("boss"), ["maintainer"]),
    signer_line("val", _pub("val"), ["validator"]), signer_line("alice", _pub("alice"))])).render()


def _config(**overrides) -> bytes:
    return render_config(apply_overrides(LedgerConfig(), overrides) if overrides else LedgerConfig()).encode()


class Main:
    """main = a genesis (signed by work unless unsigned) and whatever versions a test adds on it."""

    def __init__(self, root: Path, signed: bool = True, **overrides):
        root.mkdir()
        _git(root, "init", "-q", "-b", "main")
        self.root = root
        files = {layout.CONFIG: _config(**overrides), layout.POINTER: b"pointer 0\n"}
        if signed:
            files[SIGNERS_PATH] = SIGNERS.encode()
        self.tip = self._commit(_tree_with(root, None, files), 0, {}, [], "work" if signed else None)

    def _commit(self, tree: str, number: int, fields: dict, parents: list[str], key: str | None) -> str:
        message = format_message(f"woolf: version {number}", {"Woolf-Version": number, **fields})
        commit = commit_tree(self.root, tree, message, parents, key_for(key) if key else None)
        _git(self.root, "update-ref", layout.MAIN, commit)
        self.tip = commit
        return commit

    def number(self) -> int:
        return Ledger(self.root).head().version

    def merge(self, key: str | None = "val", changes: dict | None = None) -> str:
        parent, n = self.tip, self.number() + 1
        head = _git(self.root, "commit-tree", f"{parent}^{{tree}}", "-p", parent, "--no-gpg-sign", input=b"pr\n")
        tree = _tree_with(self.root, parent, {layout.POINTER: f"pointer {n}\n".encode(), **(changes or {})})
        return self._commit(tree, n, {"Woolf-Submission": f"20260101T000000000Z-alice-{n:08x}"}, [parent, head], key)

    def change(self, changes: dict, key: str | None = "boss") -> str:
        parent = self.tip
        return self._commit(_tree_with(self.root, parent, changes), self.number() + 1, {"Woolf-Change": "config"},
                            [parent], key)

    def copy(self, dest: Path) -> Main:
        """This repository copied to ``dest`` (one genesis built per module, not per test)."""
        return copied(self, dest, "root")

    def ledger(self, sign_as: str | None = None) -> Ledger:
        led = Ledger(self.root)
        led.git.sign_key = str(key_for(sign_as)) if sign_as else None  # never this machine's own git config
        return led


@pytest.fixture(scope="module")
def _templates(tmp_path_factory) -> Templates:
    return Templates(tmp_path_factory.mktemp("trust"), Main)


@pytest.fixture
def make_main(tmp_path, _templates):
    """make_main(signed=True, **config overrides): a fresh copy of that genesis-only ledger for this test."""
    return lambda signed=True, **overrides: _templates.copy_for(tmp_path, signed, **overrides)


def _untrusted(led: Ledger) -> IntegrityError:
    with pytest.raises(IntegrityError) as info:
        require_trusted_head(led, led.head())
    assert info.value.hint == HINT
    return info.value


# -- require_trusted_head ----------------------------------------------------------------------


def test_a_head_signed_by_the_right_keys_is_trusted(make_main):
    main = make_main()
    require_trusted_head(main.ledger(), main.ledger().head())  # genesis, by a maintainer
    main.change({layout.CONFIG: _config(name="renamed")}, key="boss")
    main.merge(key="val")
    main.merge(key="work")
    led = main.ledger()
    require_trusted_head(led, led.head())
    require_trusted_head(led, led.head())  # remembered, and still trusted


def test_an_unsigned_ledger_has_only_the_shape_rules(make_main):
    main = make_main(signed=False)
    main.change({layout.CONFIG: _config(name="anyone")}, key=None)
    main.merge(key=None)
    led = main.ledger()
    assert not is_signed(led, led.head().commit)
    require_trusted_head(led, led.head())
    main.merge(key=None, changes={layout.CONFIG: _config(name="sneaked")})
    assert _untrusted(main.ledger()).message == (
        f"main's head (version 3) {main.tip[:12]} is not trusted: the merge also changes ['ledger/woolf.toml']")


@pytest.mark.parametrize(("key", "why"), [
    (None, "no signature (needs a validator key)"),
    ("alice", "signed by alice, who is not a validator in ledger/allowed_signers"),
    ("boss", "signed by boss, who is not a validator in ledger/allowed_signers"),
    ("mallory", "a good signature by a key not in allowed_signers (needs a validator key)"),
])
def test_a_head_not_signed_by_a_validator_is_not_trusted(make_main, key, why):
    main = make_main()
    head = main.merge(key=key)
    assert _untrusted(main.ledger()).message == f"main's head (version 1) {head[:12]} is not trusted: {why}"


def test_a_head_that_changes_the_config_in_a_merge_is_not_trusted(make_main):
    main = make_main()
    head = main.merge(key="val", changes={layout.CONFIG: _config(**{"policy.min_improvement": "-100"})})
    assert _untrusted(main.ledger()).message == (
        f"main's head (version 1) {head[:12]} is not trusted: the merge also changes ['ledger/woolf.toml']")


@pytest.mark.parametrize(("key", "why"), [
    ("val", "signed by val, who is not a maintainer in ledger/allowed_signers"),
    (None, "no signature (needs a maintainer key)"),
])
def test_a_config_changed_without_a_maintainers_key_is_not_trusted_under_an_honest_head(make_main, key, why):
    main = make_main()
    tampered = main.change({layout.CONFIG: _config(**{"policy.min_improvement": "-100"})}, key=key)
    main.merge(key="val")  # a validator's honest merge on top of it
    main.merge(key="val")
    assert _untrusted(main.ledger()).message == (
        f"the commit that last changed the config or signers {tampered[:12]} is not trusted: {why}")


def test_signers_added_without_a_maintainers_key_are_not_trusted(make_main):
    main = make_main()
    mine = SIGNERS + signer_line("mallory", _pub("mallory"), ["validator", "maintainer"]) + "\n"
    grab = main.change({SIGNERS_PATH: mine.encode()}, key="mallory")
    main.merge(key="mallory")  # a good signature by a validator of the (forged) signers before it
    assert _untrusted(main.ledger()).message == (
        f"the commit that last changed the config or signers {grab[:12]} is not trusted: "
        "a good signature by a key not in allowed_signers (needs a maintainer key)")


def test_a_config_smuggled_in_by_an_earlier_merge_is_not_trusted(make_main):
    main = make_main()
    smuggled = main.merge(key="val", changes={layout.CONFIG: _config(**{"merge.alpha_base": "10.0"})})
    main.merge(key="val")
    assert _untrusted(main.ledger()).message == (
        f"the commit that last changed the config or signers {smuggled[:12]} is not trusted: "
        "the merge also changes ['ledger/woolf.toml']")


# -- require_validator_key ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["val", "work"])
def test_a_validator_key_may_sign_merges(make_main, name):
    main = make_main()
    led = main.ledger(sign_as=name)
    require_validator_key(led, led.head())
    require_validator(led, led.head())


@pytest.mark.parametrize("name", ["alice", "boss", "mallory"])
def test_this_clones_key_must_be_a_validators(make_main, name):
    main = make_main()
    led = main.ledger(sign_as=name)
    with pytest.raises(UsageError) as info:
        require_validator_key(led, led.head())
    assert info.value.message == f"the key {key_for(name)} is not a validator key in ledger/allowed_signers"
    assert info.value.hint.startswith("ask a maintainer to add it: `woolf signers add NAME --role validator --key KEY.pub`")


def test_a_signed_ledger_needs_a_key_unless_a_forge_ci_job_only_evaluates(make_main):
    local = make_main()
    led = local.ledger()
    with pytest.raises(UsageError) as info:
        require_validator_key(led, led.head())
    assert info.value.message == "this ledger is signed: a validator needs its SSH key"
    github = make_main(**{"forge.kind": "github", "forge.repo": "owner/ledger"})
    require_validator_key(github.ledger(), github.ledger().head())  # the apply job signs (ci/merge.sh)


def test_an_unsigned_ledger_needs_no_validator_key(make_main):
    main = make_main(signed=False)
    for sign_as in (None, "mallory"):
        led = main.ledger(sign_as=sign_as)
        require_validator(led, led.head())


# -- require_command_trust ---------------------------------------------------------------------


def test_an_unsigned_ledgers_training_command_needs_an_opt_in(make_main, monkeypatch):
    monkeypatch.delenv("WOOLF_TRUST_COMMAND", raising=False)
    main = make_main(signed=False, **{"workload.command": f'"{COMMAND}"'})
    led = main.ledger()
    with pytest.raises(UsageError) as info:
        require_command_trust(led, led.head())
    assert info.value.message == ("this ledger's config asks to run 'python' for training, and the ledger is "
                                  "unsigned: nobody vouches for that config")
    for almost in ("true", "yes", "1 ", "0"):
        monkeypatch.setenv("WOOLF_TRUST_COMMAND", almost)
        with pytest.raises(UsageError):
            require_command_trust(led, led.head())
    monkeypatch.setenv("WOOLF_TRUST_COMMAND", "1")
    require_command_trust(led, led.head())


def test_a_signed_ledgers_training_command_is_vouched_for(make_main, monkeypatch):
    monkeypatch.delenv("WOOLF_TRUST_COMMAND", raising=False)
    main = make_main(**{"workload.command": f'"{COMMAND}"'})
    led = main.ledger()
    require_command_trust(led, led.head())


def test_a_blank_training_command_on_an_unsigned_ledger_is_refused_clearly(make_main, monkeypatch):
    monkeypatch.delenv("WOOLF_TRUST_COMMAND", raising=False)
    main = make_main(signed=False, **{"workload.command": '"   "'})
    led = main.ledger()
    assert led.config.workload.command == "   "
    with pytest.raises(UsageError, match="the ledger is unsigned"):
        require_command_trust(led, led.head())


def test_a_validator_is_named_by_its_signer_not_host_and_pid(network, cli):
    from woolf.ledger.trust import signer_name

    alice, val = network.clone("alice"), network.clone("val")
    assert signer_name(val) == "val" and signer_name(network.clone("nokey", key="nobody")) is None
    network.train_submit(alice, "alice", steps=2)
    r = cli("validate", cwd=val.root)
    assert r.returncode == 0, r.stderr
    pr = alice.git.out("for-each-ref", "--format=%(refname)", "refs/woolf/pr").split()[0].split("/")[3]
    r = cli("pr", "show", pr, cwd=alice.root)
    assert "validator val" in " ".join(r.stdout.split()), r.stdout
