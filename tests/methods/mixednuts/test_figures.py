"""MixedNUTS's figures, checked on the figure objects (not pixels): tradeoff.png's axes stay within 0-100 % and its
labels do not overlap on the committed demo report's curve; objective.png colours equal objectives with the middle
of its scale, not its dark end, and its ticks are readable."""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest
from figure_checks import overlapping_texts

from mixzoo.core.card import MixCard
from mixzoo.core.figures import figure_module
from mixzoo.methods.mixednuts.figures import objective_figure, objective_range, tradeoff_figure

ROOT = Path(__file__).resolve().parents[3]
DEMO_REPORT = ROOT / "benchmarks/results/mixednuts_fmnist/demo_adaptive_apgd_n200/report.json"


@pytest.fixture()
def close():
    figs = []
    yield figs.append
    for fig in figs:
        figure_module().close(fig)


def _curve(abc_clean: float) -> dict:
    """A curve whose ABC is ``abc_clean`` accurate (digits: 0.995) and has no robust accuracy."""
    nuts = [{"beta": b, "alpha": 0.9, "clean_accuracy": c, "robust_accuracy": r}
            for b, c, r in ((0.9, 0.985, 0.20), (0.95, 0.975, 0.28), (0.99, 0.965, 0.30))]
    lin = [{"alpha": a, "clean_accuracy": c, "robust_accuracy": r}
           for a, c, r in ((0.5, 0.99, 0.0), (0.9, 0.975, 0.25), (1.0, 0.96, 0.30))]
    return {"attack": "fast", "screening": "screening", "n_robust": 200, "n_clean": 200, "card_beta": 0.95,
            "mixednuts": nuts, "linear": lin, "abc": {"clean_accuracy": abc_clean, "robust_accuracy": 0.0},
            "rbc": {"clean_accuracy": 0.96, "robust_accuracy": 0.30}}


@pytest.mark.parametrize("abc_clean", [0.995, 1.0])
def test_tradeoff_axes_stay_within_0_and_100_percent(abc_clean, close):
    card = MixCard("mixednuts", {"s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.9, "beta": 0.95})
    fig = tradeoff_figure(types.SimpleNamespace(curve=_curve(abc_clean), card=card, models=[]))
    close(fig)
    ax = fig.axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert 0 <= x0 < x1 <= 100 and 0 <= y0 < y1 <= 100
    assert x1 >= 100 * abc_clean and y0 == 0  # the ABC's point (robust 0 %) is on the axes
    assert not any(line.get_clip_on() for line in ax.lines)  # edge markers are drawn whole


def test_tradeoff_of_the_demo_report_has_no_overlapping_labels(close):
    """The committed report behind the README's figure (points crowded at 88-90 % clean)."""
    report = json.loads(DEMO_REPORT.read_text())
    fig = tradeoff_figure(types.SimpleNamespace(curve=report["curve"], card=report["card"], models=[]))
    close(fig)
    ax = fig.axes[0]
    assert overlapping_texts(ax) == []
    assert min(t.get_fontsize() for t in ax.texts) >= 7.5
    assert ax.get_xlim()[1] <= 100


def _grid_card(objectives: np.ndarray) -> MixCard:
    s_vals, p_vals, c_vals = [1.0, 2.0], [1.0, 2.0], [-0.5, 0.0, 0.5]
    return MixCard("mixednuts", {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.9, "beta": 0.95, "grid": {
        "s_values": s_vals, "p_values": p_vals, "c_values": c_vals, "objectives": objectives.tolist()}})


def test_equal_objectives_take_the_middle_colour_not_the_dark_end(close):
    obj = np.full((2, 2, 3), 0.25)
    obj[0, 0, 0] = 2.0  # one point excluded by App. D.8.2
    fig = objective_figure(_grid_card(obj))
    close(fig)
    image = fig.axes[0].images[0]
    vmin, vmax = image.get_clim()
    assert vmin < 0.25 < vmax and 0.25 - vmin == pytest.approx(vmax - 0.25)
    assert float(image.norm(0.25)) == pytest.approx(0.5)
    assert "every feasible point 0.25" in fig._suptitle.get_text()


def test_different_objectives_span_the_scale(close):
    obj = np.linspace(0.1, 0.4, 12).reshape(2, 2, 3)
    assert objective_range(obj) == (pytest.approx(0.1), pytest.approx(0.4))
    assert objective_range(np.full((2, 2), np.nan)) == (0.0, 1.0)
    fig = objective_figure(_grid_card(obj))
    close(fig)
    assert fig.axes[0].images[0].get_clim() == (pytest.approx(0.1), pytest.approx(0.4))
    assert "every feasible point" not in fig._suptitle.get_text()
    ticks = fig.axes[0].get_xticklabels() + fig.axes[0].get_yticklabels()
    assert ticks and min(t.get_fontsize() for t in ticks) >= 8
