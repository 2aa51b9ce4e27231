"""No interpreter tax: `woolf submit` of a float32 model never imports torch, and its numpy arithmetic
writes the same delta file, bit for bit, as the torch path (subnormals, -0.0, large magnitudes)."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import run_cli
from woolf.core import npdelta
from woolf.core.finite import first_nonfinite, scan
from woolf.core.merge import compute_delta
from woolf.storage.weights import TRUSTED_LIMITS, load_checked, load_trusted, spec_of, to_torch
from woolf.storage.writer import sha256_of, write_hashed


def _hostile_floats(rng: np.random.Generator, n: int) -> np.ndarray:
    """Normal values, subnormals, signed zeros, the largest finite magnitudes and their neighbours."""
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32).copy()
    x[~np.isfinite(x)] = 0.0
    k = n // 8
    x[:k] = rng.standard_normal(k).astype(np.float32)
    x[k:2 * k] = (rng.integers(1, 1 << 23, k, dtype=np.uint32)).view(np.float32)  # positive subnormals
    x[2 * k:3 * k] = -x[k:2 * k]
    x[3 * k:3 * k + 50] = -0.0
    x[3 * k + 50:3 * k + 100] = 0.0
    x[3 * k + 100:3 * k + 150] = np.float32(3.4028235e38)
    x[3 * k + 150:3 * k + 200] = np.float32(-3.4028235e38)
    return x


@pytest.mark.unit
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_delta_is_the_torch_delta_bit_for_bit(tmp_path, seed):
    rng = np.random.default_rng(seed)
    shapes = {"w": (257, 129), "b": (1031,), "s": (), "e": (0, 4)}
    base = {k: _hostile_floats(rng, int(np.prod(s))).reshape(s) for k, s in shapes.items()}
    trained = {k: _hostile_floats(rng, v.size).reshape(v.shape) for k, v in base.items()}
    for k in base:  # also tiny steps around the base, the usual case, and x - x = +0.0
        trained[k].reshape(-1)[: v.size // 3 if (v := base[k]).size else 0] = (
            base[k].reshape(-1)[: base[k].size // 3] * np.float32(1.0001))
    trained["b"][-10:] = base["b"][-10:]
    want = compute_delta({k: torch.from_numpy(v.copy()) for k, v in trained.items()},
                         {k: torch.from_numpy(v.copy()) for k, v in base.items()})
    buf = {k: v.copy() for k, v in trained.items()}
    got = npdelta.subtract(buf, base, into=buf)
    assert got["w"].ctypes.data == buf["w"].ctypes.data  # trained's memory, no new array
    for k in base:
        assert got[k].tobytes() == want[k].numpy().tobytes(), k
    save_file(want, tmp_path / "torch.safetensors")
    ref = (tmp_path / "torch.safetensors").read_bytes()
    md5, sha = write_hashed(got, tmp_path / "numpy.safetensors")
    assert (tmp_path / "numpy.safetensors").read_bytes() == ref
    assert (md5, sha) == (hashlib.md5(ref).hexdigest(), hashlib.sha256(ref).hexdigest())
    assert sha256_of(got) == sha
    # read back as numpy: the same bytes, the same spec the torch reader sees
    arrays = load_checked(tmp_path / "numpy.safetensors", TRUSTED_LIMITS, numpy=True, finite=False)
    assert spec_of(arrays) == spec_of(want)
    assert all(arrays[k].tobytes() == want[k].numpy().tobytes() for k in want)
    assert all(torch.equal(to_torch(arrays)[k], load_trusted(tmp_path / "torch.safetensors")[k]) for k in want)


@pytest.mark.unit
def test_numpy_subtract_refuses_what_it_cannot_do_exactly():
    with pytest.raises(ValueError):
        npdelta.subtract({"a": np.zeros(3, np.float32)}, {"b": np.zeros(3, np.float32)})
    with pytest.raises(ValueError):
        npdelta.subtract({"a": np.zeros(3, np.float16)}, {"a": np.zeros(3, np.float16)})
    assert npdelta.all_float32({"a": ("F32", (3,))}) and not npdelta.all_float32({"a": ("BF16", (3,))})
    assert not npdelta.all_float32({})


@pytest.mark.unit
def test_scan_on_numpy_arrays_matches_torch():
    cases = [{"a": np.random.default_rng(0).standard_normal(100).astype(np.float32)},
             {"a": np.zeros(10, np.float32), "n": np.zeros(3, np.int64)},
             {"a": np.zeros(10, np.float32), "n": np.array([0, 1])},
             {"a": np.full(4, 1e-45, np.float32)}, {"a": np.full(4, 3e38, np.float32)},
             {"e": np.zeros(0, np.float32)}, {"h": np.full(5, 60000.0, np.float16)}]
    for bad in (np.nan, np.inf, -np.inf):
        t = np.ones(50, np.float32)
        t[17] = bad
        cases.append({"a": np.ones(3, np.float32), "b": t})
    for case in cases:
        assert scan(case) == scan(to_torch(case)), case
        assert first_nonfinite(case) == first_nonfinite(to_torch(case))
    assert scan(cases[-1])[0] == "b"


def _imports(stderr: str) -> set[str]:
    """Top-level package names from `python -X importtime` lines."""
    return {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s+([\w.]+)\s*$", stderr, re.M)}


def test_submit_command_never_imports_torch_and_sends_the_same_delta(network, tmp_path):
    alice = network.clone("alice")
    alice.pull()
    base = load_trusted(alice.weights_path(alice.head()))
    assert all(v.dtype == torch.float32 for v in base.values())
    g = torch.Generator().manual_seed(3)
    trained = {k: v + torch.randn(v.shape, generator=g) * 1e-3 for k, v in base.items()}
    trained[next(iter(trained))].view(-1)[:5] = torch.tensor([1e-45, -0.0, 0.0, 3e38, -1e-40])
    save_file(trained, tmp_path / "trained.safetensors")
    want = {k: trained[k] - base[k] for k in base}
    save_file(want, tmp_path / "want.safetensors")
    proc = run_cli("-C", str(alice.root), "submit", "--weights", str(tmp_path / "trained.safetensors"),
                   "--contributor", "alice", "--json", cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    mods = _imports(proc.stderr)
    assert "woolf" in mods and "numpy" in mods  # the import log is real and complete
    assert "torch" not in mods
    result = json.loads(proc.stdout)
    assert result["delta_sha256"] == hashlib.sha256((tmp_path / "want.safetensors").read_bytes()).hexdigest()
