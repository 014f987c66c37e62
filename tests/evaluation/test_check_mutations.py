"""Mutation-audit tests for ``mixzoo sanity`` (mixzoo/sanity.py) and ``mixzoo verify`` (mixzoo/verify.py).

Each test pins one behaviour the audit found untested: expected values come from the definitions in the modules'
docstrings (grey image x0 = 1/2, monotonicity in eps, points inside [0, 1] and the eps-ball, the true mixture's
verdict, index sets rather than counts, verified accuracy = (clean-correct here - confirmed broken) / n), computed
independently in the test. Real reports are small digits benches (n = 20, a few attack iterations).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from typer.testing import CliRunner

from mixzoo.bench import ADVERSARIAL_FILE, bench
from mixzoo.cli import app
from mixzoo.data import load_dataset
from mixzoo.errors import InputError, MixzooError
from mixzoo.models import load_model
from mixzoo.pipeline import mix
from mixzoo.sanity import EpsSweep, SweepRow, _row, default_radii, eps_sweep, markdown
from mixzoo.verify import _margins, _verify_row, verify_report

FAST = dict(n_calib=120, n_iter=8, n_target_classes=2, batch_size=60, progress=False)
N = 20
BENCH = dict(attack="apgd", n=N, attack_options={"n_iter": 5, "n_target_classes": 2}, curve=False, plots=False,
             match_options={"n_iter": 3, "n_target_classes": 1}, batch_size=25, progress=False)
K = 3


# --------------------------------------------------------------------------------------------- sanity: by hand
class GreyIsTwo(nn.Module):
    """Class 0 for dark images, 1 for bright ones, 2 at the grey image (logits from the mean pixel m)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.flatten(1).mean(dim=1)
        return torch.stack([1 - 2 * m, 2 * m - 1, 1 - 4 * (m - 0.5).abs()], dim=1)


def _images(*values: float, size: int = 4) -> torch.Tensor:
    return torch.stack([torch.full((1, 2, size // 2), v) for v in values])


def _evs(*robust: list[bool]) -> list[dict]:
    return [{"robust_correct": r, "clean_correct": [True] * len(r), "seconds": 1.0} for r in robust]


def test_the_model_is_asked_at_the_grey_image_and_its_argmax_is_the_grey_class():
    model = GreyIsTwo()
    with torch.no_grad():  # the premise: class 2 at x0 = 1/2, class 0 at the black image
        assert int(model(torch.full((1, 1, 2, 2), 0.5)).argmax()) == 2
        assert int(model(torch.zeros(1, 1, 2, 2)).argmax()) == 0
    images = _images(0.4, 0.6)
    row = _row("m", "rbc", model, _evs([True, True]), [0.2], images, torch.tensor([2, 0]), "Linf")
    assert row.grey_class == 2
    # example 0 has the grey class as label: the grey image cannot break it; example 1 it breaks (0.1 <= 0.2)
    assert row.grey_misses == [1] and row.grey_bound == [0.5]


def test_the_grey_image_is_legal_at_exactly_its_distance():
    """x0 lies in the closed ball: ||x - x0|| <= eps, so a distance equal to the radius counts."""
    images = _images(0.25, 0.75, 0.5)  # L-inf distances 0.25, 0.25, 0 (exact in float32)
    row = _row("m", "rbc", GreyIsTwo(), _evs([True, True, True]), [0.25], images, torch.tensor([0, 1, 1]), "Linf")
    assert row.grey_misses == [3] and row.checked_robust_accuracy == [0.0] and row.misses == [3]


def test_the_grey_reach_uses_the_sweeps_norm():
    # 4 pixels at 0.4: L-inf distance 0.1, L2 distance 0.2
    images = _images(0.4)
    labels = torch.tensor([0])
    linf = _row("m", "rbc", GreyIsTwo(), _evs([True], [True]), [0.15, 0.25], images, labels, "Linf")
    l2 = _row("m", "rbc", GreyIsTwo(), _evs([True], [True]), [0.15, 0.25], images, labels, "L2")
    assert linf.grey_misses == [1, 1]
    assert l2.grey_misses == [0, 1] and l2.grey_bound == [1.0, 0.0] and l2.checked_robust_accuracy == [1.0, 0.0]


def test_the_grey_bound_counts_reached_examples_of_the_grey_class_as_unbreakable():
    images = _images(0.5, 0.5, 0.0, 1.0)  # all reached at eps 0.5
    labels = torch.tensor([2, 0, 2, 1])  # the grey image (class 2) breaks examples 1 and 3 only
    row = _row("m", "abc", GreyIsTwo(), _evs([False, False, False, False]), [0.5], images, labels, "Linf")
    assert row.grey_bound == [0.5] and row.grey_misses == [0]


def test_checked_accuracy_is_what_survives_both_checks():
    images = _images(0.0, 0.0, 0.0)  # grey distance 0.5: unreachable at 0.1 and 0.2, reached at 0.5
    labels = torch.tensor([2, 0, 0])
    evs = _evs([True, True, False], [True, False, True], [True, True, True])
    row = _row("m", "rbc", GreyIsTwo(), evs, [0.1, 0.2, 0.5], images, labels, "Linf")
    # example 0 (grey class) survives throughout; 1 is broken at 0.2; 2 broken at 0.1 so not robust at 0.2 or 0.5
    assert row.robust_accuracy == pytest.approx([2 / 3, 2 / 3, 1.0])
    assert row.checked_robust_accuracy == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert row.monotone_misses == [0, 1, 0] and row.grey_misses == [0, 0, 2]


def _sweep_row(name: str, mono: list[int], grey: list[int]) -> SweepRow:
    k = len(mono)
    return SweepRow(name=name, kind="rbc", clean_accuracy=0.75, robust_accuracy=[0.5] * k,
                    checked_robust_accuracy=[0.25] * k, monotone_misses=mono, grey_misses=grey, grey_class=0,
                    grey_bound=[1.0] * k, n=4, seconds=[0.0] * k)


def _sweep(*rows: SweepRow) -> EpsSweep:
    return EpsSweep(radii=[0.1, 0.2], models=list(rows), attack="pgd", norm="Linf", eps=0.1, n=4,
                    dataset={"name": "digits", "fingerprint": "f"}, reach=0.5, seconds=0.0)


@pytest.mark.parametrize(("mono", "grey"), [([0, 1], [0, 0]), ([0, 0], [1, 0])])
def test_either_kind_of_miss_fails_the_sweep_and_is_counted(mono, grey):
    sweep = _sweep(_sweep_row("a", [0, 0], [0, 0]), _sweep_row("b", mono, grey))
    assert not sweep.passed
    assert sweep.models[1].misses == [m + g for m, g in zip(mono, grey, strict=True)]
    written = sweep.to_dict()
    assert written["passed"] is False and written["models"][1]["misses"] == sweep.models[1].misses
    assert _sweep(_sweep_row("a", [0, 0], [0, 0])).passed


def test_both_kinds_of_misses_are_added():
    row = _sweep_row("b", [2, 1], [3, 0])
    assert row.misses == [5, 1]


def test_markdown_cells_show_checked_accuracy_and_misses_only_where_there_are_misses():
    text = markdown(_sweep(_sweep_row("ok", [0, 0], [0, 0]), _sweep_row("bad", [0, 1], [0, 0])))
    assert "| ok | 75.0 | 0 | 50.0 | 50.0 |" in text
    assert "| bad | 75.0 | 0 | 50.0 | 50.0 -> 25.0 (1 missed) |" in text and "**FAILED.**" in text


def test_default_radii_keep_the_nominal_eps_beyond_the_grey_reach():
    x = _images(0.0, 0.3)  # L-inf reach 0.5
    assert default_radii(0.6, x, "Linf") == [0.6]
    assert default_radii(0.5, x, "Linf") == [0.5]


# ------------------------------------------------------------------------------------ digits card and report
@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("check")
    mix("digits-std", "digits-pgd", out=root / "card.toml", cache_dir=root / "cache", **FAST)
    bench(root / "card.toml", out=root / "bench", cache_dir=root / "cache", save_adversarial=True, **BENCH)
    return root


def test_sweep_input_checks_before_any_work(tmp_path):
    missing = tmp_path / "no-card.toml"
    with pytest.raises(InputError, match="--eps values must be positive"):
        eps_sweep(missing, radii=[0.0, 0.2], n=4, cache_dir=tmp_path)
    with pytest.raises(InputError, match=r"--linear-alpha must be in \[0.5, 1\]"):
        eps_sweep(missing, linear_alpha=1.01, n=4, cache_dir=tmp_path)
    for alpha in (0.5, 1.0):  # the ends of [1/2, 1] are legal: the next complaint is the missing card
        with pytest.raises(MixzooError) as err:
            eps_sweep(missing, linear_alpha=alpha, n=4, cache_dir=tmp_path)
        assert "--linear-alpha" not in str(err.value) and "no-card.toml" in str(err.value)


def test_sweep_sorts_radii_and_evaluates_the_models_it_names(digits, tmp_path):
    from mixzoo.mixing import MixedClassifier

    sweep = eps_sweep(digits / "card.toml", n=N, batch_size=N, radii=[0.5, 0.2], attack="pgd",
                      attack_options={"n_iter": 1}, linear_alpha=1.0, cache_dir=tmp_path / "cache", progress=False)
    assert sweep.radii == [0.2, 0.5] and sweep.reach == 0.5
    # the largest radius reaches every example (the digits all have a 0 pixel): no "add it to --eps" note
    assert not any("is below" in note for note in sweep.notes)
    data = load_dataset("digits", "evaluation", n=N)
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    mixed = MixedClassifier.from_card(digits / "card.toml", abc, rbc)
    grey = torch.full_like(data.images[:1], 0.5)

    def clean(model):
        with torch.no_grad():
            return float((model(data.images).argmax(1) == data.labels).double().mean())

    def grey_class(model):
        with torch.no_grad():
            return int(model(grey).argmax(1))

    # premise: the RBC and the ABC differ here, so each row shows which model it evaluated
    assert clean(abc) != clean(rbc) and grey_class(abc) != grey_class(rbc)
    lin, nuts = sweep.models[2], sweep.models[3]
    # alpha = 1: the linear mixture is the RBC's softmax (Bai et al. Eq. 1), not the ABC's
    assert lin.clean_accuracy == clean(rbc) and lin.grey_class == grey_class(rbc)
    assert nuts.clean_accuracy == clean(mixed) and nuts.grey_class == grey_class(mixed)


def _edited_card(digits, tmp_path, **changes):
    from mixzoo.card import MixCard

    data = MixCard.load(digits / "card.toml").to_dict()
    for key, value in changes.items():
        # a common table (attack, data, ...) or a parameter of the method's section (alpha: data["mixednuts"])
        where = data if key in data else data[data["method"]]
        if isinstance(value, dict):
            where[key] = {**where[key], **value}
        else:
            where[key] = value
    return MixCard.from_dict(data).save(tmp_path / "edited.toml")


def test_the_mixednuts_row_evaluates_the_cards_mixture(digits, tmp_path):
    """At alpha = 1/2 with T = 0 the mixture answers the ABC's class (the ABC's one-hot weighs 1/2, paper Eq. 5),
    so its row differs from the RBC's: clean accuracy and class at the grey image are the mixture's."""
    from mixzoo.card import MixCard
    from mixzoo.mixing import MixedClassifier

    card = _edited_card(digits, tmp_path, alpha=0.5)
    assert MixCard.load(card).alpha == 0.5
    sweep = eps_sweep(card, n=N, batch_size=N, radii=[0.2], attack="pgd", attack_options={"n_iter": 1},
                      linear=False, cache_dir=tmp_path / "cache", progress=False)
    data = load_dataset("digits", "evaluation", n=N)
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    mixed = MixedClassifier.from_card(MixCard.load(card), abc, rbc)
    grey = torch.full_like(data.images[:1], 0.5)
    clean = float((_predict(mixed, data.images) == data.labels).double().mean())
    assert clean != float((_predict(rbc, data.images) == data.labels).double().mean())  # premise
    assert int(_predict(mixed, grey)[0]) != int(_predict(rbc, grey)[0])  # premise
    nuts = sweep.models[-1]
    assert nuts.kind == "mixednuts" and nuts.clean_accuracy == clean
    assert nuts.grey_class == int(_predict(mixed, grey)[0])


def test_an_l2_sweep_reaches_the_farthest_example(digits, tmp_path):
    card = _edited_card(digits, tmp_path, attack={"norm": "L2", "eps": 1.0})
    sweep = eps_sweep(card, n=N, batch_size=N, radii=[1.0], attack="pgd", attack_options={"n_iter": 1},
                      linear=False, cache_dir=tmp_path / "cache", progress=False)
    images = load_dataset("digits", "evaluation", n=N).images
    dist = (images - 0.5).flatten(1).norm(dim=1)
    assert dist.min() < dist.max() - 0.1  # premise: in L2 the examples lie at different distances from grey
    assert sweep.norm == "L2" and sweep.reach == pytest.approx(float(dist.max()))
    assert any(f"is below {float(dist.max()):g}" in note for note in sweep.notes)


def test_sweep_notes_a_largest_radius_below_the_grey_reach(digits, tmp_path):
    sweep = eps_sweep(digits / "card.toml", n=N, batch_size=N, radii=[0.2], attack="pgd", linear=False,
                      attack_options={"n_iter": 1}, cache_dir=tmp_path / "cache", progress=False)
    assert any("is below 0.5" in note for note in sweep.notes)


# ------------------------------------------------------------------------------------------------- verify
def _copy(digits, tmp_path):
    shutil.copytree(digits / "bench", tmp_path / "bench")
    return tmp_path / "bench"


def _edit_report(out, edit):
    path = out / "report.json"
    report = json.loads(path.read_text())
    edit(report)
    path.write_text(json.dumps(report))


def _model_row(report, kind):
    return next(m for m in report["models"] if m["kind"] == kind)


def _vrow(res, kind):
    return next(r for r in res.rows if r.kind == kind)


def _predict(model, images):
    with torch.no_grad():
        return model(images).argmax(1)


def test_margins_of_log_probabilities():
    out = torch.log(torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]]))  # all outputs negative
    labels = torch.tensor([0, 0])
    expected = torch.log(torch.tensor([0.6 / 0.3, 0.2 / 0.5]))
    assert torch.allclose(_margins(out, labels), expected)


def test_closest_margin_is_the_true_class_minus_the_best_other_output(digits):
    res = verify_report(digits / "bench")
    from mixzoo.mixing import MixedClassifier

    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    mixed = MixedClassifier.from_card(digits / "card.toml", abc, rbc)
    points = load_file(digits / "bench" / ADVERSARIAL_FILE)
    labels = load_dataset("digits", "evaluation", n=N).labels
    index = points["mixednuts.index"]
    with torch.no_grad():
        z = mixed(points["mixednuts.images"])  # log-probabilities: every output is negative
    y = labels[index]
    true = z[torch.arange(len(y)), y]
    other = torch.stack([torch.cat([row[:c], row[c + 1:]]).max() for row, c in zip(z, y, strict=True)])
    expected = float((true - other).max())
    assert expected < 0
    assert _vrow(res, "mixednuts").closest_margin == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("bad", ["short", "not-binary"])
def test_malformed_outcome_strings_are_refused(digits, tmp_path, bad):
    out = _copy(digits, tmp_path)

    def edit(report):
        m = _model_row(report, "rbc")
        m["clean_outcomes"] = m["clean_outcomes"][:-1] if bad == "short" else "2" + m["clean_outcomes"][1:]

    _edit_report(out, edit)
    with pytest.raises(InputError, match="no per-image clean outcomes"):
        verify_report(out)


def test_points_files_with_unmatched_or_missing_entries_are_refused(digits, tmp_path):
    out = _copy(digits, tmp_path)
    points = load_file(out / ADVERSARIAL_FILE)
    save_file({**points, "abc.index": points["abc.index"][:-1].clone()}, out / ADVERSARIAL_FILE)
    with pytest.raises(InputError, match="matching 'index' and 'images'"):
        verify_report(out)
    save_file({k: v for k, v in points.items() if not k.startswith("linear.")}, out / ADVERSARIAL_FILE)
    with pytest.raises(InputError, match="has no points for row"):
        verify_report(out)


def test_a_zero_batch_size_is_refused(digits):
    with pytest.raises(InputError, match="--batch-size must be positive"):
        verify_report(digits / "bench", batch_size=0)


def test_a_mixednuts_point_is_judged_by_the_true_mixture(digits, tmp_path):
    """With the card's alpha at 1/2 and T = 0 the mixture answers the ABC's class (paper Eq. 5: the ABC's one-hot
    weighs 1/2), so the ABC's broken points, given as MixedNUTS's, are all confirmed; the RBC (or the auxiliary
    mixture of Eq. 8, alpha_d near 1) is right on some of them."""
    from mixzoo.card import MixCard
    from mixzoo.mixing import MixedClassifier

    out = _copy(digits, tmp_path)

    def edit(report):
        abc_row, nuts = _model_row(report, "abc"), _model_row(report, "mixednuts")
        # the report's card, its list of cards and the row's own card (the one verify rebuilds the row from)
        for card in (report["card"], *report["cards"], nuts["card"]):
            card[card["method"]]["alpha"] = 0.5
        nuts["clean_outcomes"], nuts["robust_outcomes"] = abc_row["clean_outcomes"], abc_row["robust_outcomes"]

    _edit_report(out, edit)
    points = load_file(out / ADVERSARIAL_FILE)
    copied = {"mixednuts.index": points["abc.index"].clone(), "mixednuts.images": points["abc.images"].clone()}
    save_file({**points, **copied}, out / ADVERSARIAL_FILE)
    data = load_dataset("digits", "evaluation", n=N)
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    card = MixCard.from_dict(json.loads((out / "report.json").read_text())["card"])
    mixed = MixedClassifier.from_card(card, abc, rbc)
    index, adv = points["abc.index"], points["abc.images"]
    y = data.labels[index]
    assert torch.equal(_predict(mixed, adv), _predict(abc, adv))  # premise: at alpha 1/2 the ABC decides
    assert torch.equal(_predict(mixed, data.images), _predict(abc, data.images))
    assert (_predict(rbc, adv) == y).any() and (_predict(mixed.auxiliary, adv) == y).any()
    row = _vrow(verify_report(out), "mixednuts")
    assert row.passed and row.confirmed == len(index) and row.not_misclassified == []


def test_a_linear_point_is_judged_by_the_linear_mixture_at_the_rows_alpha(digits, tmp_path):
    """At alpha = 1 the linear mixture of Bai et al. (Eq. 1) is the RBC alone, so the RBC's broken points, given
    as the linear row's, are all confirmed; the ABC (the other end of alpha) is right on some of them."""
    out = _copy(digits, tmp_path)

    def edit(report):
        rbc_row, lin = _model_row(report, "rbc"), _model_row(report, "linear")
        lin["alpha"] = 1.0
        lin["clean_outcomes"], lin["robust_outcomes"] = rbc_row["clean_outcomes"], rbc_row["robust_outcomes"]

    _edit_report(out, edit)
    points = load_file(out / ADVERSARIAL_FILE)
    copied = {"linear.index": points["rbc.index"].clone(), "linear.images": points["rbc.images"].clone()}
    save_file({**points, **copied}, out / ADVERSARIAL_FILE)
    y = load_dataset("digits", "evaluation", n=N).labels[points["rbc.index"]]
    assert (_predict(load_model("digits-std"), points["rbc.images"]) == y).any()  # premise
    row = _vrow(verify_report(out), "linear")
    assert row.alpha == 1.0 and row.passed and row.confirmed == len(y) and row.not_misclassified == []


def test_an_l2_report_measures_points_in_l2(digits, tmp_path):
    out = _copy(digits, tmp_path)
    eps = 1.25

    def edit(report):
        report["settings"]["norm"], report["settings"]["eps"] = "L2", eps

    _edit_report(out, edit)
    data = load_dataset("digits", "evaluation", n=N)
    points = load_file(out / ADVERSARIAL_FILE)
    index = points["abc.index"]
    dist = (points["abc.images"] - data.images[index]).flatten(1).norm(dim=1)
    far = index[dist > eps * (1 + 1e-3)].tolist()
    near = index[dist < eps * (1 - 1e-3)].tolist()
    assert far and near  # premise: the L-inf points (at most 0.2 per pixel) fall on both sides of L2 radius 1.25
    res = verify_report(out)
    assert res.norm == "L2" and res.eps == eps
    row = _vrow(res, "abc")
    assert set(far) <= set(row.outside) and not set(near) & set(row.outside)


def _clean_and_point(digits, kind="abc"):
    data = load_dataset("digits", "evaluation", n=N)
    points = load_file(digits / "bench" / ADVERSARIAL_FILE)
    return data, points, points[f"{kind}.index"], points[f"{kind}.images"].clone()


def test_a_point_outside_0_1_is_outside_even_within_eps(digits, tmp_path):
    out = _copy(digits, tmp_path)
    data, points, index, images = _clean_and_point(digits)
    i = int(index[0])
    clean = data.images[i]
    where = clean.flatten().argmin()  # a 0 pixel: pushed to -eps/2, inside the ball but below 0
    assert float(clean.flatten()[where]) == 0.0
    flat = images[0].flatten().clone()
    flat[where] = -0.1
    images[0] = flat.view_as(images[0])
    save_file({**points, "abc.images": images}, out / ADVERSARIAL_FILE)
    row = _vrow(verify_report(out), "abc")
    assert row.outside == [i] and not row.passed


def test_a_point_just_beyond_eps_is_outside_and_a_correct_outside_point_is_only_outside(digits, tmp_path):
    """Outside the ball is its own failure, whatever the model says there; the tolerance is a rounding one."""
    out = _copy(digits, tmp_path)
    data, points, index, images = _clean_and_point(digits)
    eps = 0.2
    abc = load_model("digits-std")
    # point 0: its adversarial image moved 5% further from the clean one, i.e. at 1.05 eps at most, clamped
    i0, i1 = int(index[0]), int(index[1])
    c0 = data.images[i0]
    images[0] = (c0 + 1.05 * (images[0] - c0)).clamp(0, 1)
    size0 = float((images[0] - c0).abs().max())
    assert eps * 1.01 < size0 <= eps * 1.05 + 1e-6
    # point 1: the clean image with one pixel moved by 3 eps: outside the ball, and the ABC is still right there
    c1 = data.images[i1]
    flat = c1.flatten().clone()
    flat[0] = flat[0] + 0.6 if flat[0] <= 0.4 else flat[0] - 0.6
    images[1] = flat.view_as(c1)
    assert int(_predict(abc, images[1:2])[0]) == int(data.labels[i1])
    save_file({**points, "abc.images": images}, out / ADVERSARIAL_FILE)
    row = _vrow(verify_report(out), "abc")
    assert sorted(row.outside) == sorted([i0, i1]) and row.not_misclassified == [] and not row.passed
    assert row.confirmed == len(index) - 2
    # two fewer confirmed errors, the same clean-correct examples: two more robust examples out of N
    assert row.verified_robust_accuracy == pytest.approx(row.reported_robust_accuracy + 2 / N)


def test_a_point_that_is_not_misclassified_alone_fails_the_row(digits, tmp_path):
    """Each point is judged against the label of the example it indexes (the RBC's points skip its robust ones)."""
    out = _copy(digits, tmp_path)
    data, points, index, images = _clean_and_point(digits, "rbc")
    i = int(index[-1])
    assert data.labels[i] != data.labels[len(index) - 1]  # premise: the point's position is not its example
    images[-1] = data.images[i]  # the clean image: inside the ball, and the RBC is right there (clean-correct)
    save_file({**points, "rbc.images": images}, out / ADVERSARIAL_FILE)
    row = _vrow(verify_report(out), "rbc")
    assert row.not_misclassified == [i] and row.outside == [] and not row.passed
    assert row.confirmed == len(index) - 1


def test_saved_and_reported_index_sets_are_compared_as_sets(digits, tmp_path):
    out = _copy(digits, tmp_path)
    data, points, index, _ = _clean_and_point(digits, "rbc")
    report = json.loads((out / "report.json").read_text())
    rbc = _model_row(report, "rbc")
    robust_here = [i for i, (c, r) in enumerate(zip(rbc["clean_outcomes"], rbc["robust_outcomes"], strict=True))
                   if c == r == "1"]
    assert robust_here
    moved, to = int(index[0]), robust_here[0]
    new_index = points["rbc.index"].clone()
    new_index[0] = to  # as many points as broken examples, but one for the wrong example
    save_file({**points, "rbc.index": new_index}, out / ADVERSARIAL_FILE)
    row = _vrow(verify_report(out), "rbc")
    assert row.points_saved == row.broken_reported
    assert row.missing == [moved] and row.unexpected == [to] and not row.passed


def test_a_clean_disagreement_alone_fails_the_row_without_changing_the_verified_accuracy(digits, tmp_path):
    out = _copy(digits, tmp_path)
    before = _vrow(verify_report(digits / "bench"), "rbc")
    report = json.loads((out / "report.json").read_text())
    rbc = _model_row(report, "rbc")
    robust = [i for i, (c, r) in enumerate(zip(rbc["clean_outcomes"], rbc["robust_outcomes"], strict=True))
              if c == r == "1"]
    i = robust[0]

    def edit(report):  # the report now calls a robust example a clean mistake (and so not broken, no point)
        m = _model_row(report, "rbc")
        m["clean_outcomes"] = m["clean_outcomes"][:i] + "0" + m["clean_outcomes"][i + 1:]
        m["robust_outcomes"] = m["robust_outcomes"][:i] + "0" + m["robust_outcomes"][i + 1:]

    _edit_report(out, edit)
    row = _vrow(verify_report(out), "rbc")
    assert row.clean_disagrees == [i] and row.missing == [] and row.unexpected == [] and not row.passed
    assert row.outside == row.not_misclassified == [] and row.confirmed == before.confirmed > 0
    # the verified figure counts the clean-correct examples here, not the report's
    assert row.verified_robust_accuracy == before.verified_robust_accuracy


def test_a_report_claiming_a_clean_mistake_correct_disagrees(digits, tmp_path):
    out = _copy(digits, tmp_path)
    data = load_dataset("digits", "evaluation", n=N)
    mistakes = torch.nonzero(_predict(load_model("digits-pgd"), data.images) != data.labels).flatten().tolist()
    assert mistakes
    i = mistakes[0]

    def edit(report):  # clean-correct and robust in the report, a clean mistake of the RBC here
        m = _model_row(report, "rbc")
        assert m["clean_outcomes"][i] == "0"
        m["clean_outcomes"] = m["clean_outcomes"][:i] + "1" + m["clean_outcomes"][i + 1:]
        m["robust_outcomes"] = m["robust_outcomes"][:i] + "1" + m["robust_outcomes"][i + 1:]

    _edit_report(out, edit)
    row = _vrow(verify_report(out), "rbc")
    assert row.clean_disagrees == [i] and not row.passed


def test_cli_verify_fails_without_json_too(digits, tmp_path):
    out = _copy(digits, tmp_path)
    _, points, _, images = _clean_and_point(digits)
    save_file({**points, "abc.images": images * 0 + 2.0}, out / ADVERSARIAL_FILE)
    result = CliRunner().invoke(app, ["verify", str(out)])
    assert result.exit_code == 1 and "NOT verified" in result.output


class MeanVersusHalf(nn.Module):
    """Two classes: logits (mean pixel, 1/2), so the margin of class 0 is the mean pixel minus 1/2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.flatten(1).double().mean(dim=1)
        return torch.stack([m, torch.full_like(m, 0.5)], dim=1)


def test_fragile_points_are_those_within_1e_4_of_the_boundary():
    """``FRAGILE = 1e-4``: a confirmed point at margin -5e-5 is fragile, one at -5e-4 is not."""
    images = torch.full((2, 1, 2, 2), 0.6)  # margin +0.1: both clean-correct
    labels = torch.tensor([0, 0])
    adv = torch.stack([torch.full((1, 2, 2), 0.5 - 5e-5), torch.full((1, 2, 2), 0.5 - 5e-4)]).double()
    pts = {"index": torch.tensor([0, 1]), "images": adv}
    m = {"name": "m", "kind": "rbc", "clean_outcomes": "11", "robust_outcomes": "00", "robust_accuracy": 0.0}
    row = _verify_row(m, MeanVersusHalf(), pts, images.double(), labels, 0.2, "Linf", 8, "cpu")
    assert row.passed and row.confirmed == 2 and row.verified_robust_accuracy == 0.0
    assert row.fragile == 1 and row.closest_margin == pytest.approx(-5e-5, rel=1e-3)
