"""The overall progress line's ETA (:class:`mixzoo.core.progress.Phases`) on a fake clock."""

from __future__ import annotations

import pytest

from mixzoo.core import progress


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def tick() -> Clock:
    return Clock()


def test_the_eta_follows_the_estimates_scaled_by_the_finished_phases(tick):
    tracker = progress.Phases(["a", "b", "c"], [10.0, 20.0, 30.0], now=tick)
    tracker.advance()
    tick.t += 5.0  # a took half its estimate
    tracker.advance()
    assert tracker.eta() == pytest.approx(25.0)  # half of b's 20 and c's 30
    tick.t += 4.0
    assert tracker.eta() == pytest.approx(21.0)  # b's 10 s less its 4 s so far, c's 15
    assert progress.clock(3725) == "1:02:05" and progress.clock(73) == "1:13" and progress.clock(None) == "?"


def test_a_phase_planned_at_about_nothing_does_not_rescale_the_eta(tick):
    tracker = progress.Phases(["cached", "b", "c"], [0.01, 20.0, 30.0], now=tick)
    tracker.advance()
    tick.t += 6.0  # a phase planned at ~0 s (cached) took 6 s
    tracker.advance()
    assert tracker.eta() == pytest.approx(50.0)  # b's 20 and c's 30 as planned, not scaled 600x


def test_the_finished_phases_rescale_the_others_at_most_max_scale(tick):
    tracker = progress.Phases(["a", "b"], [10.0, 10.0], now=tick)
    tracker.advance()
    tick.t += 100.0  # 10x slower than planned
    tracker.advance()
    assert tracker.eta() == pytest.approx(progress.MAX_SCALE * 10.0)
    tracker = progress.Phases(["a", "b"], [10.0, 10.0], now=tick)
    tracker.advance()
    tick.t += 0.5  # 20x faster
    tracker.advance()
    assert tracker.eta() == pytest.approx(10.0 / progress.MAX_SCALE)


def test_the_running_phase_follows_its_bars_measured_pace(tick):
    tracker = progress.Phases(["a", "b"], [10.0, 10.0], now=tick)
    tracker.advance()
    tracker.show("attack", 0.0, 100.0)
    tick.t += 10.0
    tracker.show("attack", 25.0, 100.0)  # a quarter in 10 s: 30 s left at that pace, 0 s left by the plan
    trust = 1 - 0.75**2  # the measured pace's weight at a quarter done
    assert tracker.eta() == pytest.approx(trust * 30.0 + (1 - trust) * 0.0 + 10.0)
    tick.t += 30.0
    tracker.show("attack", 100.0, 100.0)
    assert tracker.eta() == pytest.approx(10.0)  # the bar done: only b is left, not rescaled by the running phase


def test_between_two_counts_the_running_phase_counts_down(tick):
    tracker = progress.Phases(["a"], [None], now=tick)
    tracker.advance()
    tracker.show("attack", 0.0, 6.0)
    tick.t += 50.0
    tracker.show("attack", 5.0, 6.0)  # 10 s a count: 10 s left
    tick.t += 6.0
    tracker.show("attack", 5.0, 6.0)  # a refresh without a new count
    assert tracker.eta() == pytest.approx(4.0)  # not 56 s at the pace of 5 counts in 56 s
    tick.t += 30.0
    assert tracker.eta() == 0.0  # past what the last count left


def test_a_new_bar_starts_its_own_clock(tick):
    tracker = progress.Phases(["a"], [None], now=tick)
    tracker.advance()
    tracker.show("shared attack", 0.0, 10.0)
    tick.t += 50.0
    tracker.show("shared attack", 10.0, 10.0)
    tracker.show("extra attack", 0.0, 4.0)
    tick.t += 2.0
    tracker.show("extra attack", 1.0, 4.0)
    assert tracker.eta() == pytest.approx(6.0)  # 2 s a count, 3 counts left: the first bar's 50 s not counted
    tracker.show("extra attack", 0.0, 4.0)  # the same bar counting anew (another row)
    tick.t += 1.0
    tracker.show("extra attack", 2.0, 4.0)
    assert tracker.eta() == pytest.approx(1.0)


def test_the_eta_is_none_when_nothing_is_estimated_before_the_first_phase(tick):
    tracker = progress.Phases(["a", "b"], [None, None], now=tick)
    assert tracker.eta() is None
    tracker.advance()
    tick.t += 61.0
    assert tracker.eta() == 0.0 and tracker.line() == "phase 1 of 2: a; elapsed 1:01, ETA 0:00"
