"""Figures read at the size the docs show them: tradeoff.png's labels do not overlap one another, the card's own
point is drawn, each linear point is labelled and the title states the one n; sanity.png's and margins.png's legends
sit outside the data and coinciding lines stay distinguishable."""

from __future__ import annotations

import types

import pytest
import torch
from figure_checks import overlapping_texts

from mixzoo.core.card import MixCard
from mixzoo.core.figures import renderer_of


@pytest.fixture()
def captured(monkeypatch):
    import mixzoo.core.figures as core_figures
    import mixzoo.methods.mixednuts.figures as figures

    plt = core_figures.figure_module()  # Agg, as the writers use it
    figs = []
    monkeypatch.setattr(figures, "_save_png", lambda fig, path: figs.append(fig))  # noqa: ARG005
    monkeypatch.setattr(core_figures, "save_png", lambda fig, path: figs.append(fig))  # noqa: ARG005
    yield figs
    for fig in figs:
        plt.close(fig)


def _crowded_curve() -> dict:
    """The shape that printed labels on top of each other: betas 0.98-0.995 within a point of the RBC."""
    nuts = [{"beta": b, "alpha": 0.9, "clean_accuracy": c, "robust_accuracy": r} for b, c, r in (
        (0.9, 0.899, 0.629), (0.95, 0.882, 0.673), (0.97, 0.879, 0.693), (0.98, 0.875, 0.697),
        (0.985, 0.870, 0.703), (0.99, 0.864, 0.710), (0.995, 0.862, 0.710))]
    lin = [{"alpha": a, "clean_accuracy": c, "robust_accuracy": r} for a, c, r in (
        (0.5, 0.941, 0.0), (0.6, 0.942, 0.423), (0.7, 0.921, 0.537), (0.8, 0.901, 0.617), (0.85, 0.886, 0.657),
        (0.9, 0.878, 0.673), (0.95, 0.865, 0.70), (0.98, 0.858, 0.713), (1.0, 0.854, 0.713))]
    return {"attack": "fast", "screening": "screening", "n_robust": 300, "n_clean": 300, "card_beta": 0.985,
            "mixednuts": nuts, "linear": lin, "abc": {"clean_accuracy": 0.949, "robust_accuracy": 0.0},
            "rbc": {"clean_accuracy": 0.854, "robust_accuracy": 0.713}}


def test_tradeoff_labels_do_not_overlap_and_the_card_point_is_drawn(tmp_path, captured):
    from mixzoo.methods.mixednuts.figures import plot_tradeoff

    card = MixCard("mixednuts", {"s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.9, "beta": 0.985})
    plot_tradeoff(types.SimpleNamespace(curve=_crowded_curve(), card=card, models=[]), tmp_path / "t.png")
    (fig,) = captured
    ax = fig.axes[0]
    assert overlapping_texts(ax) == []
    texts = [t.get_text() for t in ax.texts]
    assert {"ABC", "RBC"} <= set(texts)
    assert all(any(f"{a:g}" in t.split(", ") for t in texts) for a in (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98))
    star = [line for line in ax.lines if line.get_marker() == "*"]
    assert len(star) == 1 and list(star[0].get_xdata()) == [pytest.approx(87.0)]
    assert "n = 300" in ax.get_title() and "n=" not in ax.get_ylabel() and "n=" not in ax.get_xlabel()
    # no label sits on the RBC's marker
    renderer = renderer_of(fig)
    rbc_px = ax.transData.transform((85.4, 71.3))
    assert not any(t.get_window_extent(renderer).contains(*rbc_px) for t in ax.texts if t.get_text() != "RBC")


def test_sanity_legend_outside_and_lines_distinguishable(tmp_path, captured):
    from mixzoo.evaluation.sanity import EpsSweep, SweepRow, plot_sweep

    rows = [SweepRow(name=name, kind=kind, clean_accuracy=0.9, robust_accuracy=[0.4, 0.0, 0.0],
                     checked_robust_accuracy=[0.4, 0.0, 0.0], monotone_misses=[0, 0, 0], grey_misses=[0, 0, 0],
                     grey_class=0, grey_bound=[1.0, 1.0, 0.1], n=100, seconds=[1.0] * 3)
            for name, kind in (("a", "abc"), ("b", "rbc"), ("Linear mix", "linear"), ("MixedNUTS", "mixednuts"))]
    sweep = EpsSweep(radii=[0.1, 0.2, 0.4], models=rows, attack="apgd", norm="Linf", eps=0.1, n=100, reach=0.5,
                     dataset={"name": "digits", "fingerprint": "f"}, seconds=1.0)
    plot_sweep(sweep, tmp_path / "s.png")
    (fig,) = captured
    ax = fig.axes[0]
    renderer = renderer_of(fig)
    assert not ax.get_legend().get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    model_lines = ax.lines[:4]
    styles = {(line.get_marker(), str(line.get_linestyle()), line.get_markersize()) for line in model_lines}
    assert len(styles) == 4  # coinciding lines still tell apart


def test_margins_legend_does_not_cover_the_histograms(tmp_path, captured):
    from mixzoo.methods.mixednuts.figures import margin_histograms, plot_margins

    g = torch.Generator().manual_seed(0)
    cal = types.SimpleNamespace(clean_logits=torch.randn(40, 5, generator=g),
                                attacked_logits=torch.randn(40, 5, generator=g),
                                labels=torch.randint(0, 5, (40,), generator=g))
    card = MixCard("mixednuts", {"s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.8, "beta": 0.985})
    plot_margins(card, margin_histograms(card, cal),
                 tmp_path / "m.png")
    (fig,) = captured
    renderer = renderer_of(fig)
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends and not any(leg.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
                               for leg in legends for ax in fig.axes)
