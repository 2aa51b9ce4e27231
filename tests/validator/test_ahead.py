"""Issue 35: the delta's storage hashes run beside its checks, merge and evaluation, and the candidate is written and
hashed while it is evaluated; neither lets anything land before the verdict.

A delta whose bytes are the ones its submission declares (sha256) but whose storage address (md5) is not
theirs is still rejected as "delta object: ... does not match its hash", after its merge was made in memory:
nothing is pushed, nothing is cached under that address, no candidate file stays behind. A candidate written
ahead and then refused by the gate leaves nothing either; one accepted is the file the validator would have
written itself (the same md5 and sha256, checked by the audit).
"""

from __future__ import annotations

import hashlib
import json

from safetensors.torch import save

from tests.conftest import make_network
from tests.crafting import craft_pr, craft_prs
from tests.hostile_corpus import storage_object
from tests.validator.test_validator import _delta
from woolf.audit.recompute import audit
from woolf.protocol import layout
from woolf.storage.files import md5_file
from woolf.storage.pointer import Pointer
from woolf.validator import Validator
from woolf.validator.copyindex import copy_index


def _at_wrong_address(net, sub, tensors) -> tuple[str, str]:
    """A PR whose declared sha256 is its bytes' and whose md5 (pointer and submission.json alike) names
    an object in storage that holds those very bytes, at an address that is not their md5."""
    data = save(tensors)
    fake = hashlib.md5(b"not these bytes", usedforsecurity=False).hexdigest()
    obj = storage_object(net, fake)
    obj.parent.mkdir(parents=True, exist_ok=True)
    obj.write_bytes(data)
    obj.chmod(0o444)
    declared = {"kind": "dense", "sha256": hashlib.sha256(data).hexdigest(), "md5": fake, "size": len(data)}

    def wrong_pointer(files, sub_id):
        _, ptr_rel, _ = layout.submission_paths(sub_id)
        return {**files, ptr_rel: Pointer(fake, len(data), "delta.safetensors").render()}

    return craft_pr(sub, tensors=tensors, meta_patch={"delta": declared}, files_patch=wrong_pointer), fake


def _work_files(val) -> list:
    work = val.root / layout.WORK / "validator"
    return sorted(p.name for p in work.iterdir()) if work.is_dir() else []


def test_a_delta_whose_md5_is_not_its_address_is_rejected_after_its_merge_and_nothing_lands(tmp_path):
    net = make_network(tmp_path, **{"scoring.enabled": "false", "policy.min_improvement": "-10"})
    sub, val = net.clone("sub"), net.clone("val")
    sub_id, fake = _at_wrong_address(net, sub, _delta(sub, seed=1))
    meta = json.loads(sub.git.show_bytes(f"{layout.PR_PREFIX}/{sub_id}/head:{layout.submission_paths(sub_id)[2]}"))
    assert meta["delta"]["md5"] == fake  # the declared sha256 is the bytes', the md5 is not
    head = val.head("refs/remotes/origin/main").commit
    v = Validator(val, device="cpu", name="v")
    [verdict] = v.run()
    assert verdict.state == "rejected" and verdict.reason.startswith("delta object:"), verdict.reason
    assert "does not match its hash" in verdict.reason
    assert "merge" in verdict.timings  # checked and merged while the md5 ran: the verdict waited for it
    assert verdict.metrics == {"before": None, "after": None} and verdict.content is None
    val.fetch()
    assert val.head("refs/remotes/origin/main").commit == head  # nothing pushed
    assert not val.store.cache_path(fake).exists()  # nothing cached under an address that is not its md5
    assert not list(val.store.cache_path(fake).parent.glob(".fetch.*"))  # nor half-admitted
    assert not [n for n in _work_files(val) if n.startswith("candidate-")]  # the candidate written ahead: gone
    assert v.state.resident is None and v.state.ahead is None  # main's memory held the refused merge
    honest = craft_pr(sub, tensors=_delta(sub, seed=2), who="p2")  # the queue goes on
    [verdict] = v.run()
    assert verdict.id == honest and verdict.state == "merged", verdict.reason


def test_a_delta_that_is_not_its_declared_sha256_is_rejected_and_what_was_made_of_it_dropped(tmp_path):
    """Its md5 is its address, its submission.json declares another sha256: the checks and the merge ran
    on bytes not yet known to be the declared ones (they ran beside its hashes); the verdict is the one the
    in-line check gave, and the copy index keeps nothing under that sha256 (a sketch of other bytes)."""
    net = make_network(tmp_path, **{"scoring.enabled": "false", "policy.min_improvement": "-10"})
    sub, val = net.clone("sub"), net.clone("val")
    tensors = _delta(sub, seed=3)
    other = hashlib.sha256(save(_delta(sub, seed=4))).hexdigest()  # an honest delta's, say
    data = save(tensors)
    declared = {"kind": "dense", "sha256": other, "md5": hashlib.md5(data, usedforsecurity=False).hexdigest(),
                "size": len(data)}
    craft_pr(sub, tensors=tensors, meta_patch={"delta": declared})
    head = val.head("refs/remotes/origin/main").commit
    v = Validator(val, device="cpu", name="v")
    [verdict] = v.run()
    assert verdict.state == "rejected", verdict.reason
    assert verdict.reason == "delta bytes do not match the sha256 in submission.json"
    assert "merge" in verdict.timings  # merged in memory while its hashes ran: the verdict waited for them
    assert other not in copy_index(v.state).entries and other not in copy_index(v.state).ahead
    val.fetch()
    assert val.head("refs/remotes/origin/main").commit == head
    assert not [n for n in _work_files(val) if n.startswith("candidate-")]


def test_a_candidate_written_ahead_is_the_version_or_nothing(make_net):
    net = make_net(**{"policy.min_improvement": "1e9", "scoring.enabled": "false"})  # the gate refuses
    sub, val = net.clone("sub"), net.clone("val")
    v = Validator(val, device="cpu", name="v")
    craft_pr(sub, tensors=_delta(sub, seed=0), who="p0")
    [verdict] = v.run()
    assert verdict.state == "rejected" and "improvement" in verdict.reason
    assert v.state.ahead is None and not [n for n in _work_files(val) if n.startswith("candidate-")]


def test_accepted_candidates_written_ahead_are_what_the_audit_recomputes(tmp_path):
    net = make_network(tmp_path, **{"scoring.enabled": "false", "policy.min_improvement": "-10"})
    sub, val = net.clone("sub"), net.clone("val")
    craft_prs(sub, [{"tensors": _delta(sub, seed=i), "who": f"p{i}"} for i in range(2)])
    v = Validator(val, device="cpu", name="v")
    assert [x.state for x in v.run()] == ["merged"] * 2
    assert v.state.ahead is None and not [n for n in _work_files(val) if n.startswith("candidate-")]
    report = audit(val)  # each version's weights recomputed from its parent and delta: the recorded sha256
    assert report.ok, report.problems
    for version in val.log():  # every object the versions name is whole, at its md5
        ptr = val.pointer(version.commit)
        assert md5_file(val.store.fetch_object(ptr)) == ptr.md5  # read again, not the recorded hashes
