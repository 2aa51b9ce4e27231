"""A float32 delta streamed tensor by tensor: the same bytes as a whole-model delta, refusals leave no file."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from woolf.core.npdelta import subtract
from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage.files import hashes_of_file
from woolf.storage.kinds import DENSE
from woolf.storage.streamdelta import StreamedDelta, ZeroDelta
from woolf.storage.weights import load_checked, spec_of

pytestmark = pytest.mark.unit


def _pair(tmp_path, seed=0):
    g = np.random.default_rng(seed)
    base = {f"t{i}": g.standard_normal((i + 3, 5)).astype(np.float32) for i in range(4)}
    base["b.weight"] = np.array([0.0, -0.0, 1e-45, 3e38], dtype=np.float32)  # signed zero, subnormal, huge
    trained = {k: (v + g.standard_normal(v.shape).astype(np.float32) * 1e-3).astype(np.float32)
               for k, v in base.items()}
    save_file(base, tmp_path / "base.safetensors")
    save_file(trained, tmp_path / "trained.safetensors")
    return base, trained


def test_the_streamed_delta_is_bit_for_bit_the_whole_model_one(tmp_path):
    base, trained = _pair(tmp_path)
    d = StreamedDelta(tmp_path / "trained.safetensors", tmp_path / "base.safetensors", LimitsConfig(),
                      spec_of(base))
    got = d.write(tmp_path / "streamed.safetensors")
    want = DENSE.write(subtract(trained, base), tmp_path / "whole.safetensors", DENSE.declared())
    assert got == want == hashes_of_file(tmp_path / "streamed.safetensors")
    assert (tmp_path / "streamed.safetensors").read_bytes() == (tmp_path / "whole.safetensors").read_bytes()


def test_nan_and_zeros_are_refused_and_leave_no_file(tmp_path):
    base, trained = _pair(tmp_path)
    trained["t2"][1, 1] = np.nan
    save_file(trained, tmp_path / "trained.safetensors")
    d = StreamedDelta(tmp_path / "trained.safetensors", tmp_path / "base.safetensors", LimitsConfig(),
                      spec_of(base))
    with pytest.raises(InvalidWeightsError, match="'t2' holds NaN"):
        d.write(tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()
    d = StreamedDelta(tmp_path / "base.safetensors", tmp_path / "base.safetensors", LimitsConfig(), spec_of(base))
    with pytest.raises(ZeroDelta):
        d.write(tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()


def test_a_trained_file_of_another_shape_or_dtype_is_refused_before_anything_is_read(tmp_path):
    base, trained = _pair(tmp_path)
    save_file({**trained, "t0": trained["t0"][:1]}, tmp_path / "bad.safetensors")
    with pytest.raises(InvalidWeightsError, match="'t0'"):
        StreamedDelta(tmp_path / "bad.safetensors", tmp_path / "base.safetensors", LimitsConfig(), spec_of(base))
    save_file({**trained, "t0": trained["t0"].astype(np.float16)}, tmp_path / "half.safetensors")
    with pytest.raises(InvalidWeightsError, match="keeps float32 master weights"):
        StreamedDelta(tmp_path / "half.safetensors", tmp_path / "base.safetensors", LimitsConfig(), spec_of(base))
    assert load_checked(tmp_path / "trained.safetensors", LimitsConfig())  # the good file still reads
