"""Ledger operations at the I/O floor: hashing while writing, norm-proven finiteness, reused buffers,
read-only hard links between a same-filesystem storage and the cache. Every shortcut is compared
with the long way, bit for bit."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import git
from woolf.audit.recompute import audit
from woolf.core.finite import first_nonfinite, scan
from woolf.core.merge import compute_delta
from woolf.core.merge_rules import Rule, merge_step
from woolf.errors import IntegrityError
from woolf.git.repo import clean_env
from woolf.protocol import layout
from woolf.storage.weights import save_atomic
from woolf.storage.writer import sha256_of, write_hashed
from woolf.validator import Validator

CASES = [
    {"w": torch.randn(3, 4), "b": torch.randn(4), "a": torch.randn(2, dtype=torch.float64)},
    {"z": torch.randn(5).to(torch.bfloat16), "y": torch.arange(7), "x": torch.tensor([True, False]),
     "e": torch.zeros(0, 3), "é": torch.randn(2, dtype=torch.float16), "i8": torch.tensor([1, -2], dtype=torch.int8)},
    {"big": torch.randn(3_000_000), "t": torch.randn(5, 3).t().contiguous()},
]


@pytest.mark.unit
@pytest.mark.parametrize("tensors", CASES)
@pytest.mark.parametrize("metadata", [None, {"format": "pt"}])  # safetensors orders 2+ keys at random itself
def test_write_hashed_is_safetensors_bytes_and_their_hashes(tmp_path, tensors, metadata):
    save_file(tensors, tmp_path / "ref", metadata=metadata)
    md5, sha = write_hashed(tensors, tmp_path / "ours", metadata=metadata)
    ref = (tmp_path / "ref").read_bytes()
    assert (tmp_path / "ours").read_bytes() == ref
    assert (md5, sha) == (hashlib.md5(ref).hexdigest(), hashlib.sha256(ref).hexdigest())
    assert sha256_of(tensors, metadata) == sha
    assert save_atomic(tensors, tmp_path / "atomic", metadata=metadata, durable=False, hashed=True) == (md5, sha)
    assert (tmp_path / "atomic").read_bytes() == ref


@pytest.mark.unit
def test_scan_proves_finite_and_nonzero_and_falls_back_when_the_norm_cannot():
    ok = {"a": torch.randn(100), "n": torch.arange(3)}
    assert scan(ok) == (None, True)
    assert scan({"a": torch.zeros(10), "n": torch.zeros(3, dtype=torch.int64)}) == (None, False)
    assert scan({"a": torch.zeros(10), "n": torch.tensor([0, 1])}) == (None, True)  # an int tensor counts
    assert scan({"a": torch.full((4,), 1e-45)}) == (None, True)  # subnormal squares underflow: any() decides
    assert scan({"a": torch.full((4,), 3e38)}) == (None, True)  # squares overflow, yet every value is finite
    for bad in (float("nan"), float("inf"), float("-inf")):
        t = torch.randn(50)
        t[17] = bad
        assert scan({"a": torch.randn(3), "b": t})[0] == "b"
        assert first_nonfinite({"b": t.to(torch.bfloat16)}) == "b"
    assert first_nonfinite({"e": torch.zeros(0)}) is None


@pytest.mark.unit
def test_in_place_arithmetic_is_bit_identical():
    g = torch.Generator().manual_seed(1)
    base = {"w": torch.randn(64, 32, generator=g), "h": torch.randn(7, generator=g).to(torch.bfloat16)}
    trained = {k: (v.float() + torch.randn(v.shape, generator=g) * 1e-3).to(v.dtype) for k, v in base.items()}
    plain = compute_delta(trained, base)
    buf = {k: v.clone() for k, v in trained.items()}
    reused = compute_delta(buf, base, into=buf)
    assert reused["w"].data_ptr() == buf["w"].data_ptr()  # float32: the trained tensor's memory
    for k in base:
        assert torch.equal(plain[k].view(torch.uint8), reused[k].view(torch.uint8))
    rule = Rule("attenuated", alpha=0.7)
    want = merge_step(rule, base, None, plain, 0.37).candidate
    got = merge_step(rule, base, None, {k: v.clone() for k, v in plain.items()}, 0.37, reuse_delta=True).candidate
    for k in base:
        assert torch.equal(want[k].view(torch.uint8), got[k].view(torch.uint8))


def _obj(root, md5):
    return root / "storage" / "files" / "md5" / md5[:2] / md5[2:]


def test_same_filesystem_storage_shares_read_only_objects_and_workspace_writes_cannot_reach_them(network, tmp_path):
    alice, val, bob = network.clone("alice"), network.clone("val"), network.clone("bob")
    network.train_submit(alice, "alice")
    [verdict] = Validator(val, device="cpu").run()
    assert verdict.accepted, verdict.reason
    head = bob.pull()
    ptr = bob.pointer(head.commit)
    stored, cached, local = _obj(tmp_path, ptr.md5), bob.store.cache_path(ptr.md5), bob.root / layout.WEIGHTS
    assert os.path.samestat(stored.stat(), cached.stat())  # fetched by a link, not a copy
    assert os.path.samestat(stored.stat(), val.store.cache_path(ptr.md5).stat())  # uploaded by a link
    assert stored.stat().st_mode & 0o222 == 0
    assert not os.path.samestat(local.stat(), stored.stat())  # the workspace file is a copy
    before = stored.read_bytes()
    out = bob.checkout(1, tmp_path / "v1.safetensors")
    for f in (local, out):  # a participant edits or overwrites the files they were given
        t = load_file(f)
        save_file({k: v + 1 for k, v in t.items()}, f)
        with open(f, "r+b") as fh:
            fh.seek(100)
            fh.write(b"\x00" * 64)
    assert stored.read_bytes() == before == cached.read_bytes()
    assert hashlib.sha256(before).hexdigest() == head.weights_sha256
    assert audit(bob).ok


def test_in_place_write_to_a_linked_object_is_caught_not_served(network, tmp_path):
    """The hazard DVC warns of with link cache types: someone chmods a shared object and edits it."""
    c = network.clone("c")
    ptr = c.pointer(c.head().commit)
    c.checkout(0, tmp_path / "first")
    cached = c.store.cache_path(ptr.md5)
    assert os.path.samestat(cached.stat(), _obj(tmp_path, ptr.md5).stat())
    cached.chmod(0o644)
    with open(cached, "r+b") as fh:
        fh.seek(200)
        fh.write(b"\xff" * 8)
    os.utime(cached, ns=(cached.stat().st_atime_ns, cached.stat().st_mtime_ns + 10**9))
    with pytest.raises(IntegrityError):
        c.checkout(0, tmp_path / "second")
    assert not (tmp_path / "second").exists()
    fresh = network.clone("fresh")  # storage has the edited bytes too: every reader refuses them
    with pytest.raises(IntegrityError):
        fresh.checkout(0, tmp_path / "third")


def test_storage_on_another_path_kind_is_copied_and_hashed_on_the_way(network, tmp_path):
    """A symbolic link in storage is never linked into the cache; the streamed copy refuses it."""
    c = network.clone("c2")
    ptr = c.pointer(c.head().commit)
    obj = _obj(tmp_path, ptr.md5)
    real = tmp_path / "elsewhere"
    real.write_bytes(obj.read_bytes())
    obj.unlink()
    obj.symlink_to(real)
    with pytest.raises(IntegrityError, match="symbolic link"):
        c.checkout(0, tmp_path / "o")
    git("status", cwd=c.root)


def test_local_storage_is_read_and_written_without_opening_dvcs_repo(network, tmp_path):
    """files/md5/<2>/<30> under a local storage directory: DVC's layout, reached directly, read by `dvc pull`."""
    alice, val = network.clone("alice"), network.clone("val")
    network.train_submit(alice, "alice")
    assert alice.store._repo is None  # uploaded by a link, verified by a stat
    [verdict] = Validator(val, device="cpu").run()
    assert verdict.accepted, verdict.reason
    d = network.clone("d")
    d.checkout(1, tmp_path / "v1")
    assert d.store._repo is None
    plain = tmp_path / "plain"  # a clone that never ran woolf: plain git + dvc pull
    git("clone", "-q", str(network.hub), str(plain), cwd=tmp_path)
    subprocess.run([str(Path(sys.executable).parent / "dvc"), "pull", "-q"], cwd=plain, check=True,
                   env=clean_env(), capture_output=True)
    assert (plain / layout.WEIGHTS).read_bytes() == (tmp_path / "v1").read_bytes()


def test_weights_are_hashed_as_they_load_and_nothing_unverified_is_returned(network, tmp_path, monkeypatch):
    """One pass: a fetched object is read into memory and hashed on the way, never hashed then read."""
    import woolf.storage.dvcstore as dvcstore
    from woolf.errors import InvalidWeightsError
    from woolf.storage.files import hashes_of_file
    from woolf.storage.weights import TRUSTED_LIMITS, load_checked

    c = network.clone("c3")
    head = c.head()
    ptr = c.pointer(head.commit)
    stored = _obj(tmp_path, ptr.md5)
    want = load_file(stored)
    real_hashes = hashes_of_file(stored)

    def second_pass(path, *a, **k):
        raise AssertionError(f"{path} hashed in a pass of its own")

    monkeypatch.setattr(dvcstore, "hashes_of_file", second_pass)
    got = c.load_weights(head)
    cached = c.store.cache_path(ptr.md5)
    assert os.path.samestat(cached.stat(), stored.stat())  # linked, then hashed while loaded
    assert c.store.verified.lookup(cached) == real_hashes
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert c.load_weights(head, numpy="float32")[next(iter(want))].tobytes() == want[next(iter(want))].numpy().tobytes()

    # a reader that refuses the bytes: its error comes after the object is hashed and cached whole
    d = network.clone("d3")
    with pytest.raises(InvalidWeightsError, match="not the ledger's model"):
        d.store.fetch_object(ptr, read=lambda p, cb: load_checked(p, TRUSTED_LIMITS, expect={"x": ("F32", (1,))},
                                                                      on_block=cb))
    assert d.store.verified.lookup(d.store.cache_path(ptr.md5)) == real_hashes

    # storage holding other bytes of the right size: IntegrityError, nothing cached, nothing returned
    e = network.clone("e3")
    data = bytearray(stored.read_bytes())
    data[-1] ^= 1
    stored.unlink()
    stored.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        e.load_weights(head)
    assert not e.store.cache_path(ptr.md5).exists()
