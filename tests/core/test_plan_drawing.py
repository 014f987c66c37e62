"""The plans' timing of figures: :func:`mixzoo.core.plan.figures_seconds`, :func:`~mixzoo.core.plan.drawing_seconds`."""

from __future__ import annotations

from mixzoo.core.plan import drawing_seconds, figures_seconds


def test_figures_are_drawn_twice_and_the_second_timed():
    calls = []

    def draw(folder):
        calls.append(folder)
        (folder / "a.png").write_bytes(b"x")
        return 1

    count, seconds = figures_seconds(draw)
    assert count == 1 and len(calls) == 2 and seconds >= 0.0
    assert not calls[0].exists()  # a temporary folder, removed


def test_drawing_seconds_grows_with_the_figures():
    assert drawing_seconds(0) == 0.0
    assert drawing_seconds(3) > 0.0
