"""Intervals for accuracies (Wilson) and for paired differences of accuracies (Newcombe's method 10)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from mixzoo.stats import newcombe_interval, paired_difference, wilson_interval


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 3000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_matches_scipy(kn):
    k, n = kn
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(k, n) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_wilson_refuses_impossible_counts():
    with pytest.raises(ValueError):
        wilson_interval(0, 0)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=300))
def test_paired_difference_counts_and_contains_the_estimate(pairs):
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    d = paired_difference(a, b)
    assert d.difference == pytest.approx(sum(a) / len(a) - sum(b) / len(b))
    assert d.a_only - d.b_only == sum(a) - sum(b)
    assert -1.0 <= d.low <= d.difference <= d.high <= 1.0
    # swapping the models mirrors the interval
    e = paired_difference(b, a)
    assert (e.low, e.high) == pytest.approx((-d.high, -d.low), abs=1e-12)


def test_identical_models_give_a_tight_interval_around_zero():
    a = [True] * 700 + [False] * 300
    d = paired_difference(a, a)
    assert d.difference == 0 and d.a_only == d.b_only == 0
    assert d.high - d.low < 0.01  # no disagreement: the difference is pinned down


def test_pairing_narrows_the_interval_when_the_models_mostly_agree():
    # MixedNUTS vs its RBC, robust: 690 robust for both, 20 only for the RBC, 2 only for MixedNUTS
    theta, low, high = newcombe_interval(690, 2, 20, 288)
    assert theta == pytest.approx(-0.018)
    assert high < 0  # the loss is real
    l1, u1 = wilson_interval(692, 1000)
    l2, u2 = wilson_interval(710, 1000)
    assert high - low < 0.5 * ((u1 - l1) + (u2 - l2))


def test_paired_interval_covers_at_its_nominal_rate():
    """Simulated 2x2 tables like MixedNUTS vs RBC (few disagreements): 95 % intervals cover ~95 % of the time."""
    rng = np.random.default_rng(0)
    for probs, n in (([0.68, 0.005, 0.02, 0.295], 1000), ([0.5, 0.1, 0.05, 0.35], 200), ([0.85, 0.01, 0.0, 0.14], 300)):
        theta = probs[1] - probs[2]
        hits = sum(low <= theta <= high for low, high in
                   (newcombe_interval(*map(int, rng.multinomial(n, probs)))[1:] for _ in range(2000)))
        assert 0.925 <= hits / 2000 <= 0.99, (probs, hits / 2000)


def test_paired_difference_needs_the_same_examples():
    with pytest.raises(ValueError, match="same examples"):
        paired_difference([True, False], [True])
    with pytest.raises(ValueError, match="at least one"):
        paired_difference([], [])
