"""core/sequential.py: Student's t, the finite-population interval, the looks, and the error rate of
stopping early to reject (the rule the validator's sequential gate uses, validator/paired.py)."""

from __future__ import annotations

import math
import random

import pytest

from woolf.core.sequential import (
    block_ends,
    combined,
    interval,
    reject_early,
    t_quantile,
    window_order,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("p", "df", "want"), [(0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 10, 2.2281),
                                                (0.995, 5, 4.0321), (0.95, 30, 1.6973), (0.975, 1000, 1.9600)])
def test_t_quantile_matches_the_tables(p, df, want):
    assert t_quantile(p, df) == pytest.approx(want, abs=1e-4)


def test_t_quantile_refuses_a_lower_tail():
    with pytest.raises(ValueError):
        t_quantile(0.4, 3)


def test_window_order_is_a_permutation_drawn_from_the_seed():
    a, b = window_order("main-commit", 60), window_order("main-commit", 60)
    assert a == b and sorted(a) == list(range(60))
    assert window_order("other", 60) != a


def test_block_ends_end_at_the_population_in_at_most_eight_looks():
    assert block_ends(60) == [8, 16, 24, 32, 40, 48, 56, 60]
    assert block_ends(15) == [4, 8, 12, 15]  # at least 4 windows a look
    assert block_ends(3) == [3] and block_ends(0) == []
    assert len(block_ends(10_000)) == 8


def test_interval_is_exact_once_every_value_is_drawn_and_untrusted_on_few():
    values = [0.1, 0.3, -0.2, 0.4]
    full = interval(values, 4, 0.01)
    assert full.complete and full.half == 0.0 and full.mean == pytest.approx(0.15)
    few = interval(values[:3], 100, 0.01)
    assert few.half == math.inf and not few.below(1e9) and not few.above(-1e9)
    nan = interval([0.1] * 9 + [math.nan], 100, 0.01)
    assert nan.half == math.inf


def test_interval_shrinks_with_the_finite_population():
    values = [random.Random(i).gauss(0, 1) for i in range(20)]
    big, half = interval(values, 10_000, 0.05), interval(values, 40, 0.05)
    assert 0 < half.half < big.half
    assert half.half == pytest.approx(big.half * math.sqrt((1 - 20 / 40) / (1 - 20 / 10_000)), rel=1e-9)
    # five values left to draw: their mean is the unknown, known only as well as five values allow
    late = interval(values, 25, 0.05)
    assert late.half == pytest.approx(big.half * math.sqrt((1 - 20 / 25) / (1 - 20 / 10_000))
                                      * t_quantile(0.975, 4) / t_quantile(0.975, 19), rel=1e-9)


def test_below_and_above_settle_only_outside_the_interval():
    iv = interval([1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.0], 1000, 0.01)
    assert iv.above(0.5) and not iv.below(0.5)
    assert iv.below(2.0) and not iv.above(2.0)
    assert not iv.below(1.0) and not iv.above(1.0)


def test_combined_adds_the_variances_of_independent_parts():
    a = interval([random.Random(i).gauss(1, 1) for i in range(30)], 10_000, 0.01)
    b = interval([random.Random(100 + i).gauss(0, 1) for i in range(30)], 10_000, 0.01)
    d = combined([(1.0, a), (-1.0, b)], 0.01)
    assert d.mean == pytest.approx(a.mean - b.mean)
    assert max(a.half, b.half) < d.half < a.half + b.half
    exact = combined([(1.0, interval([1.0, 2.0], 2, 0.01)), (-0.5, interval([3.0], 1, 0.01))], 0.01)
    assert exact.half == 0.0 and exact.mean == pytest.approx(1.5 - 1.5)


def _early_reject(population: list[float], need: float, confidence: float, seed: int) -> bool:
    """The gate's loop (validator/paired.py) on a candidate whose improvement on window i is population[i]."""
    main = [0.0] * len(population)
    got, iv = reject_early(lambda idx: [-population[i] for i in idx], main, window_order(str(seed), len(main)),
                           need, confidence)
    return iv is not None


@pytest.mark.parametrize(("outliers", "confidence", "most"), [(0.0, 0.99, 10), (0.1, 0.999, 4)])
def test_stopping_early_to_reject_errs_rarely(outliers, confidence, most):
    """Populations whose whole mean passes the bar by a hair (the hardest case for the rule): every early
    rejection is an error. Roughly normal values: at most 1 - confidence of the time (1%: 10 of 1000;
    0.5% is expected). With 10% of the values at 5x the spread: about twice the bound at 0.999 (0.4%
    allowed; 0.1-0.2% expected): why the default confidence is 0.999."""
    rng = random.Random(5)
    errors = 0
    for trial in range(1000):
        pop = [rng.gauss(0, 0.05) + (rng.random() < outliers) * rng.gauss(0, 0.25) for _ in range(64)]
        shift = -0.02 - sum(pop) / len(pop) + 1e-6  # the whole mean is need + 1e-6: the full gate accepts
        pop = [x + shift for x in pop]
        assert sum(pop) / len(pop) >= -0.02
        errors += _early_reject(pop, -0.02, confidence, trial)
    assert errors <= most


def test_a_clear_regression_is_rejected_at_the_first_look_and_a_pass_sees_every_window():
    rng = random.Random(1)
    pop = [rng.gauss(-0.5, 0.05) for _ in range(64)]
    measured: list[int] = []

    def measure(idx):
        measured.extend(idx)
        return [-pop[i] for i in idx]

    got, iv = reject_early(measure, [0.0] * 64, window_order("x", 64), -0.02, 0.999)
    assert iv is not None and iv.below(-0.02) and len(got) == len(measured) == block_ends(64)[0]
    fine = [rng.gauss(0.01, 0.05) for _ in range(64)]
    got, iv = reject_early(lambda idx: [-fine[i] for i in idx], [0.0] * 64, window_order("x", 64), -0.02, 0.999)
    assert iv is None and sorted(got) == list(range(64))
    nan, iv = reject_early(lambda idx: [math.nan] * len(idx), [0.0] * 64, window_order("x", 64), -0.02, 0.999)
    assert iv is not None and len(nan) == 8  # a loss that is not finite: rejected at once
