"""The workloads' windows (features.py WINDOWS: windows, window_losses, metrics_of): each window's loss is the
same whichever windows are measured with it, in whatever order, and evaluate() is metrics_of their mean."""

from __future__ import annotations

import math
import random

import pytest

from tests.workloads.hf.test_workload import gpt2_dir, hf_network  # noqa: F401 - the tiny model's fixture
from woolf.errors import UsageError
from woolf.workloads.charlm import CharLM
from woolf.workloads.features import WINDOWS, features_of

pytestmark = pytest.mark.unit


def _check(wl, weights, data: bytes):
    n, size = wl.windows(data)
    assert n > 8 and size == wl.context and WINDOWS in features_of(wl)
    every = wl.window_losses(weights, data, range(n))
    order = list(range(n))
    random.Random(3).shuffle(order)
    part = wl.window_losses(weights, data, order[:5])
    assert part == pytest.approx([every[i] for i in order[:5]], rel=1e-5)  # other windows beside them: the same
    got = wl.evaluate(weights, data)
    assert got == pytest.approx(wl.metrics_of(math.fsum(every) / n), rel=1e-12)
    for metric, factor in wl.LINEAR_METRICS.items():
        assert got[metric] == pytest.approx(factor * got["loss"], rel=1e-12)
    assert wl.window_losses(weights, data, []) == []


def test_charlm_windows():
    wl = CharLM(d_model=32, n_layer=1, context=32)
    _check(wl, wl.genesis(0), wl.benchmark_bytes()[:2048])
    assert wl.windows(b"") == (0, 32)
    with pytest.raises(UsageError, match="less than one window"):  # a loss of 0.0 would read as a perfect score
        wl.evaluate(wl.genesis(0), b"abc")


def test_transformers_windows(tmp_path, gpt2_dir):  # noqa: F811 - the fixture
    net = hf_network(tmp_path, gpt2_dir)
    wl = net.work.workload()
    _check(wl, net.work.load_weights(net.work.head()), net.work.benchmark())
    assert "ppl" not in wl.LINEAR_METRICS  # perplexity is no mean over windows: the gate measures it whole
