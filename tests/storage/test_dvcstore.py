"""Weights read from storage (woolf/storage/dvcstore.py): hashed as they load, nothing unverified returned."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import load_file

from woolf.errors import IntegrityError


def _obj(root, md5):
    return root / "storage" / "files" / "md5" / md5[:2] / md5[2:]


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
