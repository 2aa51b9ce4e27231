"""Read-only hard links between a same-filesystem storage and the cache (woolf/storage/localobjects.py): a
local storage read and written directly, a workspace write never reaching a stored object, another path kind
copied and hashed on the way. Every shortcut is compared with the long way, bit for bit."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from tests.conftest import git
from woolf.audit.recompute import audit
from woolf.errors import IntegrityError
from woolf.git.repo import clean_env
from woolf.protocol import layout
from woolf.validator import Validator


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


