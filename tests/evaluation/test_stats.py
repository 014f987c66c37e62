"""Intervals for accuracies (Wilson) and for paired differences of accuracies (Newcombe's method 10)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from mixzoo.evaluation.stats import newcombe_interval, paired_difference, wilson_interval


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


# ------------------------------------------------------------------------------------------------- statistics
def _reference_newcombe(both: int, a_only: int, b_only: int, neither: int) -> tuple[float, float, float]:
    """Newcombe (1998) method 10 from the paper, with scipy's Wilson intervals for the two margins:
    L = theta - sqrt(dl1^2 - 2 phi dl1 du2 + du2^2), U = theta + sqrt(du1^2 - 2 phi du1 dl2 + dl2^2), where
    dl / du are the distances of a margin's estimate to its lower / upper Wilson limit and phi is the 2x2 table's
    phi coefficient, taken as 0 when a marginal total is 0."""
    n = both + a_only + b_only + neither
    p1, p2 = (both + a_only) / n, (both + b_only) / n
    ci1 = binomtest(both + a_only, n).proportion_ci(method="wilson")
    ci2 = binomtest(both + b_only, n).proportion_ci(method="wilson")
    margins = [(both + a_only), (b_only + neither), (both + b_only), (a_only + neither)]
    phi = 0.0 if 0 in margins else (both * neither - a_only * b_only) / math.sqrt(math.prod(margins))
    dl1, du1, dl2, du2 = p1 - ci1.low, ci1.high - p1, p2 - ci2.low, ci2.high - p2
    low = p1 - p2 - math.sqrt(max(0.0, dl1 ** 2 - 2 * phi * dl1 * du2 + du2 ** 2))
    high = p1 - p2 + math.sqrt(max(0.0, du1 ** 2 - 2 * phi * du1 * dl2 + dl2 ** 2))
    return p1 - p2, max(-1.0, low), min(1.0, high)


def test_wilson_refuses_impossible_counts_by_name():
    """k outside [0, n] is refused by its own check, naming the count (not by a math domain error further on)."""
    for k, n in ((11, 10), (-1, 10), (1001, 1000)):
        with pytest.raises(ValueError, match=rf"k = {k} successes is outside \[0, n = {n}\]"):
            wilson_interval(k, n)


def test_newcombe_matches_the_papers_worked_example():
    """Newcombe (1998), Table II, example (a): a, b, c, d = 36, 12, 2, 0 -> method 10: +0.0569 to +0.3404."""
    theta, low, high = newcombe_interval(36, 12, 2, 0)
    assert theta == pytest.approx(0.2)
    assert (low, high) == pytest.approx((0.0569, 0.3404), abs=5e-5)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=4, max_size=4).filter(lambda t: sum(t) > 0))
def test_newcombe_matches_an_independent_implementation(table):
    # 1e-7, not tighter: the reference's sqrt(dl^2 - 2 phi dl du + du^2) cancels to rounding (~1e-17) where the
    # exact value is 0 (no discordant pairs, p = 1/2: 39, 0, 0, 39), and its square root is then ~1e-9
    assert newcombe_interval(*table) == pytest.approx(_reference_newcombe(*table), abs=1e-7)


def test_newcombe_without_discordant_pairs_has_zero_width_at_one_half():
    """Both models right on the same examples, half of them: theta = 0 and, with phi = 1 and symmetric Wilson
    limits, both half-widths are 0 up to one rounding of a difference (not the ~1e-9 square root of a cancelling
    radicand)."""
    for k in (1, 3, 39, 40, 500):
        theta, low, high = newcombe_interval(k, 0, 0, k)
        assert theta == 0.0 and abs(low) <= 1e-15 and abs(high) <= 1e-15, (k, low, high)


def test_newcombe_with_an_empty_marginal_takes_phi_zero():
    """A table with an empty row or column has no correlation estimate: phi = 0, i.e. the two Wilson intervals'
    half-widths combine in quadrature (both models right on all 5 examples B got right, B never right alone)."""
    theta, low, high = newcombe_interval(5, 3, 0, 0)  # B's misses (b_only + neither) = 0 -> empty marginal
    p1, p2 = 1.0, 5 / 8
    ci1 = binomtest(8, 8).proportion_ci(method="wilson")
    ci2 = binomtest(5, 8).proportion_ci(method="wilson")
    assert theta == pytest.approx(p1 - p2)
    assert low == pytest.approx(theta - math.hypot(p1 - ci1.low, ci2.high - p2), abs=1e-12)
    assert high == pytest.approx(min(1.0, theta + math.hypot(ci1.high - p1, p2 - ci2.low)), abs=1e-12)


def test_paired_difference_passes_the_table_in_order():
    a = [True] * 6 + [True] * 3 + [False] * 1 + [False] * 4
    b = [True] * 6 + [False] * 3 + [True] * 1 + [False] * 4
    d = paired_difference(a, b)
    assert (d.n, d.a_only, d.b_only) == (14, 3, 1)
    assert (d.difference, d.low, d.high) == pytest.approx(_reference_newcombe(6, 3, 1, 4), abs=1e-12)
