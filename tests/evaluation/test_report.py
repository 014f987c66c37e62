"""The report writer (mixzoo/evaluation/report.py): markdown tables, report files, adversarial metadata, plots and
the trade-off curve."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch
from eval_requests import ask
from torch import nn

import mixzoo.zoo.pairs
from mixzoo.core.card import MixCard
from mixzoo.core.request import ReportRequest
from mixzoo.zoo.data import ImageDataset


# ------------------------------------------------------------------------------------------------ data
def _dataset(split: str = "calibration", n: int = 5, **changes) -> ImageDataset:
    kw = dict(name="toy", split=split, images=torch.zeros(n, 1, 2, 2), labels=torch.zeros(n, dtype=torch.long),
              num_classes=2, indices=torch.arange(n), source="toy/all")
    kw.update(changes)
    return ImageDataset(**kw)


# ------------------------------------------------------------------------------------------------ report
def _row(kind: str, clean: float, robust: float, alpha: float | None = None, card: MixCard | None = None):
    from mixzoo.evaluation.bench import ModelResult

    return ModelResult(name=f"{kind}-model", kind=kind, clean_accuracy=clean, robust_accuracy=robust,
                       attack="apgd", epsilon=0.2, norm="Linf", n=60, seconds=1.0, alpha=alpha, device="cpu",
                       method=None if card is None else card.method, card=None if card is None else card.to_dict())


def _report(rbc_clean: float = 0.8, curve: dict | None = None):
    from mixzoo.evaluation.bench import Report

    card = MixCard(
        "mixednuts",
        {"s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.9, "beta": 0.985, "top_k": 3, "objective": 0.4},
        provenance={"mixzoo_version": "9.9", "created": "2026-01-01T00:00:00+00:00"},
    )
    baseline = MixCard("linear", {"alpha": 0.7, "fit": "matched"})
    models = [_row("abc", 0.95, 0.0), _row("rbc", rbc_clean, 0.45), _row("linear", 0.85, 0.40, 0.7, baseline),
              _row("mixednuts", 0.9, 0.40, 0.9, card)]
    return Report(models=models, card=card, cards=[card],
                  dataset={"name": "digits", "split": "evaluation", "n": 60, "fingerprint": "f" * 16,
                           "calibration": {"n": 120}},
                  settings={"attack": "apgd", "norm": "Linf", "eps": 0.2, "seed": 0, "device": "cpu",
                            "seconds": 3.0},
                  curve=curve)


def test_markdown_states_the_relative_clean_error_cut_and_the_robust_change():
    """RBC error 20 %, MixedNUTS error 10 %: half the RBC's clean errors are gone; robust 40 % vs 45 %."""
    from mixzoo.evaluation.report import markdown

    text = markdown(_report())
    assert "clean error cut by 50.0% (relative), robust accuracy -5.00 points." in text
    # each mixed row shows its card's section (the method's parameters, without the search grid)
    section = text.split("## mixednuts-model, alpha 0.900: mix card (method `mixednuts`)", 1)[1]
    card_json = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    assert card_json == {"s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.9, "beta": 0.985, "clamp": "gelu", "top_k": 3,
                         "alpha_d": None, "objective": 0.4, "temperature": 0.0, "fit": "mmaa"}
    section = text.split("## linear-model, alpha 0.700: mix card (method `linear`)", 1)[1]
    assert json.loads(section.split("```json\n", 1)[1].split("```", 1)[0]) == {
        "alpha": 0.7, "temperature": 1.0, "beta": None, "target_robust": None, "fit": "matched"}
    # an RBC without clean errors has no error to cut: no line, no division by zero
    assert "clean error cut" not in markdown(_report(rbc_clean=1.0))


def test_markdown_trade_off_table_shows_each_points_own_numbers():
    from mixzoo.evaluation.report import markdown

    curve = {"attack": "apgd", "n_robust": 30, "n_clean": 60,
             "mixednuts": [{"beta": 0.95, "alpha": 0.875, "clean_accuracy": 0.9, "robust_accuracy": 0.3}],
             "linear": [{"alpha": 0.6, "clean_accuracy": 0.85, "robust_accuracy": 0.2}]}
    text = markdown(_report(curve=curve))
    assert "## Trade-off curve (apgd on 30 images; clean on 60)" in text
    assert "| 0.95 | 0.8750 | 90.00 | 30.00 |" in text.splitlines()
    assert "| 0.6 | 85.00 | 20.00 |" in text.splitlines()


def test_write_report_files_and_adversarial_metadata(tmp_path):
    from safetensors import safe_open

    from mixzoo.evaluation.bench import ADVERSARIAL_FILE
    from mixzoo.evaluation.report import write_report

    report = _report()
    report.adversarial = {"mixednuts": {"index": torch.tensor([3, 7]), "images": torch.zeros(2, 1, 8, 8)}}
    paths = write_report(report, tmp_path / "out", plots=False)
    assert [p.name for p in paths] == ["report.json", "report.md", ADVERSARIAL_FILE]
    with safe_open(str(tmp_path / "out" / ADVERSARIAL_FILE), "pt") as fh:
        meta = fh.metadata()
        assert sorted(fh.keys()) == ["mixednuts.images", "mixednuts.index"]
    assert meta == {"eps": "0.2", "norm": "Linf", "attack": "apgd", "data": "f" * 16, "n": "60"}
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["card"]["method"] == "mixednuts" and data["card"]["mixednuts"]["alpha"] == 0.9
    assert data["cards"] == [data["card"]]
    assert [m["kind"] for m in data["models"]] == ["abc", "rbc", "linear", "mixednuts"]
    assert data["models"][3]["card"] == data["card"] and data["models"][2]["card"]["linear"]["alpha"] == 0.7


def _calibration() -> types.SimpleNamespace:
    g = torch.Generator().manual_seed(0)
    return types.SimpleNamespace(clean_logits=torch.randn(40, 5, generator=g),
                                 attacked_logits=torch.randn(40, 5, generator=g),
                                 labels=torch.randint(0, 5, (40,), generator=g))


@pytest.fixture()
def captured_figures(monkeypatch):
    import matplotlib.pyplot as plt

    import mixzoo.methods.mixednuts.figures as figures

    figs = []
    monkeypatch.setattr(figures, "_save_png", lambda fig, path: figs.append(fig))  # noqa: ARG005
    yield figs
    for fig in figs:
        plt.close(fig)


def _grid_card(objectives) -> MixCard:
    grid = {"s_values": [0.5, 1.0, 2.0], "p_values": [2.0], "c_values": [-1.0, 0.0],
            "objectives": objectives}
    return MixCard("mixednuts", {"s": 2.0, "p": 2.0, "c": -1.0, "alpha": 0.9, "beta": 0.985, "grid": grid})


def test_objective_plot_marks_the_chosen_point_and_greys_only_objectives_above_one(tmp_path, captured_figures):
    """Objectives above 1 mark excluded grid points; 1.0 itself (every clean mistake kept) is a feasible value."""
    from mixzoo.methods.mixednuts.figures import plot_objective

    plot_objective(_grid_card([[[0.2, 0.3]], [[1.0, 0.5]], [[0.1, 0.4]]]), tmp_path / "o.png")  # [s][p][c]
    plot_objective(_grid_card([[[0.2, 0.3]], [[1.5, 0.5]], [[0.1, 0.4]]]), tmp_path / "o.png")
    (feasible, excluded) = captured_figures
    heat = feasible.axes[0].images[0].get_array()
    assert np.ma.count_masked(heat) == 0 and "excluded" not in feasible._suptitle.get_text()
    assert np.ma.count_masked(excluded.axes[0].images[0].get_array()) == 1
    assert "excluded" in excluded._suptitle.get_text()
    # the red star sits on (c index, s index) of the card's (c, s) = (-1.0, 2.0): column 0, row 2
    star = next(line for line in feasible.axes[0].lines if line.get_marker() == "*")
    assert (list(star.get_xdata()), list(star.get_ydata())) == ([0], [2])


def test_margin_plot_draws_the_alpha_threshold(tmp_path, captured_figures):
    """Fig. 6: the mixture follows the RBC once its margin exceeds (1 - alpha) / alpha."""
    from mixzoo.methods.mixednuts.figures import margin_histograms, plot_margins

    cal, card = _calibration(), MixCard("mixednuts", {"s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.8, "beta": 0.985})
    plot_margins(card, margin_histograms(card, cal), tmp_path / "m.png")
    (fig,) = captured_figures
    lines = [line for line in fig.axes[1].lines if str(line.get_label()).startswith("(1-alpha)/alpha")]
    assert len(lines) == 1 and list(lines[0].get_xdata()) == pytest.approx([0.25, 0.25])


def test_tradeoff_curve_records_its_sizes_and_the_linear_baselines_own_clean_accuracy(monkeypatch):
    """Fig. 8 data with the expensive parts replaced: the clean accuracy of the linear mixture is that of
    (1 - alpha) softmax(g) + alpha softmax(h) on raw logits (Bai et al.), computed here independently."""
    import importlib

    import mixzoo.attacks.runner as runner
    import mixzoo.methods.mixednuts.figures as figures
    from mixzoo.core.cache import Cache

    n_all, n_robust = 6, 4
    g = torch.tensor([[3.0, 0.0, 0.0, 0.0]] * n_all)  # the ABC: class 0, moderately sure
    h = torch.tensor([[0.0, 10.0, 0.0, 0.0]] * n_all)  # the RBC: class 1, very sure on its raw scale
    labels = torch.zeros(n_all, dtype=torch.long)
    data = _dataset(split="evaluation", n=n_all, labels=labels, num_classes=4)
    cal = types.SimpleNamespace(clean_logits=None, attacked_logits=None,  # calibrate is replaced too
                                labels=torch.zeros(40, dtype=torch.long))
    monkeypatch.setattr(figures, "calibration_data_for", lambda *a, **k: cal)
    monkeypatch.setattr(mixzoo.zoo.pairs, "cached_logits", lambda model, d, **k: g if "ABC" in k["what"] else h)
    chosen = MixCard("mixednuts", {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.7, "beta": 0.9})
    monkeypatch.setattr(importlib.import_module("mixzoo.methods.mixednuts.calibrate"), "calibrate", lambda **k: chosen)
    seen = []

    def fake_evaluate(model, images, labels_r, request):
        seen.append(len(images))
        return {"robust_correct": [i % 2 == 0 for i in range(len(images))]}

    monkeypatch.setattr(runner, "evaluate", fake_evaluate)
    card = MixCard("mixednuts", {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.7, "beta": 0.985})
    request = ReportRequest(ask(attack="apgd", eps=0.1, norm="Linf", seed=0, batch_size=4, progress=False,
                                cache=Cache(enabled=False)), n=n_robust)
    cur = figures.tradeoff_curve(card, nn.Flatten(), nn.Flatten(), data, request, betas=(0.9,), alphas=(0.5,))
    # beta 0.9 and the card's own 0.985, the linear alpha, then the ABC and the RBC alone: all on the same n images
    assert seen == [n_robust] * 5
    assert (cur["n_robust"], cur["n_clean"]) == (n_robust, n_robust) and cur["card_beta"] == 0.985
    assert [r["beta"] for r in cur["mixednuts"]] == [0.9, 0.985] and set(cur) >= {"abc", "rbc"}
    mix = 0.5 * g.softmax(1) + 0.5 * h.softmax(1)
    expected_linear = float((mix.argmax(1) == labels).float().mean())
    assert expected_linear == 0.0  # the raw-scale RBC wins: a different answer than with M(s, p, c) applied
    assert cur["linear"] == [{"alpha": 0.5, "clean_accuracy": expected_linear, "robust_accuracy": 0.5}]
    assert cur["mixednuts"][0]["robust_accuracy"] == 0.5 and cur["mixednuts"][0]["beta"] == 0.9


def test_the_margin_histograms_draw_what_the_raw_margins_drew(tmp_path, captured_figures):
    """Fig. 6 from the counts the bench keeps in the report: every histogram's steps are those matplotlib draws from
    the margins themselves (density, 40 bins over [0, 1])."""
    import matplotlib.pyplot as plt

    from mixzoo.methods.mixednuts.figures import margin_histograms, plot_margins
    from mixzoo.methods.mixednuts.transforms import confidence_margin, layer_norm, rbc_transform, transform_of

    cal, card = _calibration(), MixCard("mixednuts", {"s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.8, "beta": 0.985})
    plot_margins(card, margin_histograms(card, cal), tmp_path / "m.png")
    (fig,) = captured_figures
    stages = (lambda z: layer_norm(z, top_k=card.params["top_k"]),
              lambda z: rbc_transform(z, **transform_of(card.params)))
    bins = torch.linspace(0, 1, 41).numpy()
    for ax, fn in zip(fig.axes[:2], stages, strict=True):
        want_fig, want_ax = plt.subplots()
        for logits in (cal.clean_logits, cal.attacked_logits):
            m, correct = confidence_margin(fn(logits)), logits.argmax(1) == cal.labels
            for mask in (correct, ~correct):
                if mask.any():
                    want_ax.hist(m[mask].numpy(), bins=bins, histtype="step", density=True)
        got = [p.get_xy() for p in ax.patches]
        want = [p.get_xy() for p in want_ax.patches]
        assert len(got) == len(want) == 4
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
        plt.close(want_fig)


def test_writing_a_report_attacks_nothing(tmp_path, monkeypatch):
    """write_report only renders: with every attack and every calibration step unreachable, a MixedNUTS report
    (a card calibrated by MMAA, its curve and its margin histograms, as the bench leaves them) is written with all
    three figures."""
    import mixzoo.attacks
    import mixzoo.attacks.runner as runner
    import mixzoo.core.cache as cache_module
    import mixzoo.core.plugins as plugins
    import mixzoo.methods.mixednuts.calibration_data as calibration_data
    from mixzoo.core.errors import PluginError
    from mixzoo.evaluation.report import write_report
    from mixzoo.methods.mixednuts.figures import margin_histograms

    real_lookup, asked = plugins.lookup, []

    def no_attacks(kind, name, *a, **k):
        if kind == "attack":
            asked.append(name)
            raise PluginError(f"no attack {name!r} in this process")
        return real_lookup(kind, name, *a, **k)

    def refuse(*a, **k):
        raise AssertionError("writing a report attacked or computed")

    monkeypatch.setattr(plugins, "lookup", no_attacks)
    for module, name in ((runner, "evaluate"), (mixzoo.attacks, "mmaa"), (calibration_data, "cached_mmaa"),
                         (calibration_data, "calibration_data"), (cache_module, "batched_cached"),
                         (mixzoo.zoo.pairs, "cached_logits")):
        monkeypatch.setattr(module, name, refuse)
    curve = {"attack": "apgd", "n_robust": 30, "n_clean": 30, "card_beta": 0.985,
             "mixednuts": [{"beta": 0.985, "alpha": 0.9, "clean_accuracy": 0.9, "robust_accuracy": 0.4}],
             "linear": [{"alpha": 0.6, "clean_accuracy": 0.85, "robust_accuracy": 0.2}],
             "abc": {"clean_accuracy": 0.95, "robust_accuracy": 0.0}, "rbc": {"clean_accuracy": 0.8,
                                                                             "robust_accuracy": 0.45}}
    report = _report(curve=curve)
    card = report.card
    card.attack, card.data = {"name": "mmaa", "eps": 0.2, "norm": "Linf"}, {"n": 40}
    card.params["grid"] = {"s_values": [0.5, 2.0], "p_values": [2.0], "c_values": [-0.5, 0.0],
                           "objectives": [[[0.3, 0.4]], [[0.2, 0.5]]]}
    report.figure_data = [{"margins": margin_histograms(card, _calibration())}]
    paths = write_report(report, tmp_path / "out")
    assert {p.name for p in paths} == {"report.json", "report.md", "objective.png", "tradeoff.png", "margins.png"}
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert written["figure_data"][0]["margins"]["n_calibration"] == 40
    # a report without figure data (a bench run without --out, or without plots) has no margins figure
    report.figure_data = []
    assert "margins.png" not in {p.name for p in write_report(report, tmp_path / "again")}


def test_a_warning_several_rows_share_is_printed_once_naming_them():
    from io import StringIO

    from rich.console import Console

    from mixzoo.evaluation.report import print_report

    report = _report()
    note = "square: draws its randomness per batch, so its outcome can depend on the batch size"
    for m in report.models:
        m.warnings = [note]
    buf = StringIO()
    print_report(report, to=Console(file=buf, width=300))
    assert buf.getvalue().count("draws its randomness per batch") == 1, buf.getvalue()
    assert all(m.name in buf.getvalue().split("draws its randomness")[0].splitlines()[-1] for m in report.models)
