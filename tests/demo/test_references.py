"""The demo's reference runs (woolf/demo/references.py): the benchmark noise of the ledger's margin."""

from __future__ import annotations

import math

import pytest

from woolf.demo.references import margin_noise, window_losses
from woolf.report.story import joining_sentence
from woolf.workloads.charlm import CharLM


@pytest.mark.unit
def test_window_losses_average_to_the_benchmark_loss_and_the_noise_is_two_standard_errors():
    wl = CharLM(d_model=16, n_layer=1, n_head=2, context=16)
    bench = wl.benchmark_bytes()[:4000]
    a, b = wl.genesis(0), wl.genesis(1)
    wa = window_losses(wl, a, bench)
    assert len(wa) == (len(bench) - 1) // 16
    assert math.isclose(sum(wa) / len(wa), wl.evaluate(a, bench)["loss"], rel_tol=1e-5)
    noise, n = margin_noise(wa, window_losses(wl, b, bench))
    assert n == len(wa) and 0 < noise < 1
    assert margin_noise([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == (0.0, 3)
    assert margin_noise([1.0], [2.0]) == (None, 0) and margin_noise(None, [1.0, 2.0]) == (None, 0)


@pytest.mark.unit
def test_a_margin_within_the_benchmark_noise_is_not_called_a_win():
    demo = {"final_loss": 1.8960, "alone_loss": 1.8976, "parallel_loss": 1.85, "margin_noise": 0.0031,
            "margin_windows": 511}
    assert joining_sentence(demo) == ("too close to call: the ledger ends 0.0016 below the best participant "
                                      "alone, within the benchmark's noise of ±0.0031 (two standard errors "
                                      "over 511 windows)")
    clear = joining_sentence({**demo, "final_loss": 1.8800})
    assert clear.startswith("joining paid: the ledger ends 0.0176 below the best participant alone, ±0.0031 "
                            "benchmark noise (closing")
