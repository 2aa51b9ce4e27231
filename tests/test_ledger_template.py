"""tests/ledger_template.py: a ledger restored from a template is the one `Ledger.init` builds at its
path (same tree but for the storage path, same message, signed), audits clean, and writes to its own
storage and hub, never to the template's."""

from __future__ import annotations

import pytest

from tests.conftest import SMALL, make_network, signing_for
from tests.crafting import craft_pr
from tests.hostile_corpus import delta
from tests.ledger_template import template
from woolf.audit.recompute import audit
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger
from woolf.protocol.signatures import signatures
from woolf.protocol.signers import SIGNERS_PATH
from woolf.validator import Validator

SETTINGS = [
    ({"policy.min_improvement": "-10"}, True),
    ({"validators.quorum": "2", "policy.min_improvement": "-10", "limits.max_delta_bytes": "1000"}, True),  # a computed key, given
    ({"workload.params.d_model": "16", "policy.min_improvement": "5"}, True),  # a template of its own
    ({"policy.min_improvement": "-10"}, False),  # unsigned
]


def _files(root):
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("overrides,signed", SETTINGS)
def test_a_restored_ledger_is_what_init_builds_at_its_path(tmp_path, overrides, signed):
    settings = {**SMALL, **overrides}
    fresh = Ledger.init(tmp_path / "a" / "work", CreateOptions(storage=str(tmp_path / "a" / "storage"), overrides=settings,
                        **signing_for(signed)))
    restored = make_network(tmp_path / "b", signed=signed, **overrides).work
    assert restored.store.remote_url() == str(tmp_path / "b" / "storage")
    new, old = restored.git.ls_tree("main"), fresh.git.ls_tree("main")
    config = ".dvc/config"
    assert {k: v for k, v in new.items() if k != config} == {k: v for k, v in old.items() if k != config}
    assert (restored.git.show_bytes(f"main:{config}").decode()
            == fresh.git.show_bytes(f"main:{config}").decode().replace(str(tmp_path / "a"), str(tmp_path / "b")))
    assert restored.git.message("main") == fresh.git.message("main")
    assert restored.git.parents("main") == []
    for ledger in (restored, fresh):
        head, signers = ledger.head().commit, ledger.git.show_bytes(f"main:{SIGNERS_PATH}") or b""
        assert signatures(ledger.git, {head: signers})[head] == (("G", "work") if signed else ("N", ""))
    assert _files(restored.root / ".dvc" / "cache") == _files(fresh.root / ".dvc" / "cache")
    assert _files(tmp_path / "b" / "storage") == _files(tmp_path / "a" / "storage")
    assert audit(restored).problems == []


def test_a_restored_ledger_merges_into_its_own_storage_and_hub(network):
    tpl = template({**SMALL, "policy.min_improvement": "-10"}, signing_for(True))
    before = {p: _files(tpl / p) for p in ("work", "storage")}
    tpl_head = Ledger.open(tpl / "work").head().commit
    val = network.clone("val")
    craft_pr(val, tensors=delta(val), who="alice")
    Validator(val, device="cpu").run()
    assert len(_files(network.root / "storage")) == 3  # genesis, the delta, version 1
    assert val.log()[0].version == 1
    assert audit(network.clone("auditor")).problems == []
    assert {p: _files(tpl / p) for p in ("work", "storage")} == before
    assert Ledger.open(tpl / "work").head().commit == tpl_head != val.show(0).commit
