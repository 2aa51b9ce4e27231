"""The audit recomputes every merge from storage alone, and tells a missing object from a wrong one."""

from __future__ import annotations

from tests.conftest import git
from tests.crafting import craft_pr
from tests.hostile_corpus import delta, storage_object
from woolf.audit.recompute import audit
from woolf.validator import Validator


def test_audit_tells_missing_from_wrong(network):
    val = network.clone("val")
    craft_pr(val, tensors=delta(val), who="alice")
    Validator(val, device="cpu").run()
    v1 = storage_object(network, val.pointer(val.show(1).commit).md5)
    v1.unlink()
    report = audit(network.clone("a1"))
    assert [(p["version"], p["kind"]) for p in report.problems] == [(1, "missing")]
    assert "missing from storage" in report.problems[0]["problem"]
    v1.write_bytes(b"\0" * 10)
    report = audit(network.clone("a2"))
    assert [(p["version"], p["kind"]) for p in report.problems] == [(1, "wrong")]
    assert git("rev-parse", "main", cwd=network.hub) == val.head().commit
